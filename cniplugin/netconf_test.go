package cniplugin

import (
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestParseNetConf(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		code       uint // 0: valid
	}{
		{"minimal", `{"cniVersion":"1.1.0","name":"pods","type":"gvs"}`, 0},
		{"0.4.0 with socket", `{"cniVersion":"0.4.0","name":"pods","type":"gvs","socket":"/run/x.sock"}`, 0},
		{"1.0.0 chained with prevResult", `{"cniVersion":"1.0.0","name":"pods","type":"gvs","prevResult":{"cniVersion":"1.0.0"}}`, 0},
		{"not json", `{"cniVersion":`, types.ErrDecodingFailure},
		{"no version", `{"name":"pods","type":"gvs"}`, types.ErrInvalidNetworkConfig},
		{"old version", `{"cniVersion":"0.3.1","name":"pods","type":"gvs"}`, types.ErrIncompatibleCNIVersion},
		{"wrong type", `{"cniVersion":"1.1.0","name":"pods","type":"bridge"}`, types.ErrInvalidNetworkConfig},
		{"no name", `{"cniVersion":"1.1.0","type":"gvs"}`, types.ErrInvalidNetworkConfig},
		{"ipam", `{"cniVersion":"1.1.0","name":"p","type":"gvs","ipam":{"type":"host-local"}}`, types.ErrInvalidNetworkConfig},
		{"relative socket", `{"cniVersion":"1.1.0","name":"p","type":"gvs","socket":"gvs.sock"}`, types.ErrInvalidNetworkConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseNetConf([]byte(tc.conf))
			if tc.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if c.Socket == "" {
					t.Error("no socket")
				}
				return
			}
			var te *types.Error
			if !errors.As(err, &te) || te.Code != tc.code {
				t.Fatalf("err = %v, want code %d", err, tc.code)
			}
			if te.Details == "" && te.Code != types.ErrDecodingFailure {
				t.Error("the error does not say what to fix")
			}
		})
	}
}

func FuzzParseNetConf(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"pods","type":"gvs"}`))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"pods","type":"gvs","socket":"/run/gvs/cni.sock","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}`))
	f.Add([]byte(`{"cniVersion":"0.4.0","name":"x","type":"gvs","prevResult":{"ips":[]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseNetConf(b)
		if err != nil {
			var te *types.Error
			if !errors.As(err, &te) || c != nil {
				t.Fatalf("error %v is not a *types.Error, or came with a config", err)
			}
			return
		}
		if c.Type != PluginType || c.Name == "" || c.Socket == "" {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
	})
}
