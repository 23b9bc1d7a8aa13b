package cniplugin

import (
	"context"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestServerBandwidth: ADD keeps valid bandwidth arguments in the lease,
// and refuses invalid ones with code 7 before anything is leased or
// attached.
func TestServerBandwidth(t *testing.T) {
	s, fb, sock := newTestServer(t, "10.128.0.0/29")
	ok := `{"cniVersion":"1.1.0","name":"pods","type":"gvs","runtimeConfig":{"bandwidth":{"ingressRate":50000000,"egressRate":20000000,"egressBurst":800000}}}`
	if r := call(t, sock, "ADD", "bw1", ok); r.Error != nil {
		t.Fatal(r.Error)
	}
	l, _ := s.IPAM().Get("bw1", "eth0")
	if b := l.Bandwidth; b == nil || b.IngressRate != 50_000_000 || b.EgressRate != 20_000_000 || b.EgressBurst != 800_000 {
		t.Errorf("lease bandwidth %+v", l.Bandwidth)
	}
	zero := `{"cniVersion":"1.1.0","name":"pods","type":"gvs","runtimeConfig":{"bandwidth":{}}}`
	if r := call(t, sock, "ADD", "bw0", zero); r.Error != nil {
		t.Fatal(r.Error)
	} else if l, _ := s.IPAM().Get("bw0", "eth0"); l.Bandwidth != nil {
		t.Errorf("an empty bandwidth argument is kept as %+v, want none", l.Bandwidth)
	}
	for _, bad := range []string{
		`{"ingressBurst":1000}`,
		`{"egressRate":4}`,
		`{"ingressRate":18014398509481984}`,
		`{"egressRate":1000000,"egressBurst":68719476736}`,
	} {
		conf := `{"cniVersion":"1.1.0","name":"pods","type":"gvs","runtimeConfig":{"bandwidth":` + bad + `}}`
		r := call(t, sock, "ADD", "bad", conf)
		if code(r) != types.ErrInvalidNetworkConfig || !strings.Contains(r.Error.Details, "runtimeConfig.bandwidth") {
			t.Errorf("%s: %+v, want code 7 naming runtimeConfig.bandwidth", bad, r.Error)
		}
		if _, leased := s.IPAM().Get("bad", "eth0"); leased {
			t.Errorf("%s: refused, but leased", bad)
		}
		fb.mu.Lock()
		_, attached := fb.attached["bad/eth0"]
		fb.mu.Unlock()
		if attached {
			t.Errorf("%s: refused, but attached", bad)
		}
	}
}

// TestServerPodBandwidth: with a PodBandwidth source (Kubernetes: the
// Pod's annotations), ADD without bandwidth arguments takes the pod's
// limit; arguments win over it; the source's error fails ADD before
// anything is leased.
func TestServerPodBandwidth(t *testing.T) {
	var asked []string
	s, _, sock := newTestServerWith(t, "10.128.0.0/29", func(c *ServerConfig) {
		c.PodBandwidth = func(_ context.Context, ns, name, _ string) (*Bandwidth, error) {
			asked = append(asked, ns+"/"+name)
			switch name {
			case "bad":
				return nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid pod bandwidth annotation", "fast")
			case "none":
				return nil, nil
			}
			return &Bandwidth{EgressRate: 10_000_000}, nil
		}
	})
	if r := call(t, sock, "ADD", "annotated", testConf); r.Error != nil {
		t.Fatal(r.Error)
	}
	if l, _ := s.IPAM().Get("annotated", "eth0"); l.Bandwidth == nil || *l.Bandwidth != (Bandwidth{EgressRate: 10_000_000}) {
		t.Errorf("the pod's limit: lease bandwidth %+v", l.Bandwidth)
	}
	args := `{"cniVersion":"1.1.0","name":"pods","type":"gvs","runtimeConfig":{"bandwidth":{"egressRate":20000000}}}`
	if r := call(t, sock, "ADD", "both", args); r.Error != nil {
		t.Fatal(r.Error)
	}
	if l, _ := s.IPAM().Get("both", "eth0"); l.Bandwidth == nil || l.Bandwidth.EgressRate != 20_000_000 {
		t.Errorf("arguments and annotations: lease bandwidth %+v, want the arguments'", l.Bandwidth)
	}
	if r := call(t, sock, "ADD", "none", testConf); r.Error != nil {
		t.Fatal(r.Error)
	} else if l, _ := s.IPAM().Get("none", "eth0"); l.Bandwidth != nil {
		t.Errorf("no limit: lease bandwidth %+v", l.Bandwidth)
	}
	if r := call(t, sock, "ADD", "bad", testConf); code(r) != types.ErrInvalidNetworkConfig {
		t.Errorf("an invalid annotation: %+v, want code 7", r.Error)
	}
	if _, leased := s.IPAM().Get("bad", "eth0"); leased {
		t.Errorf("refused, but leased")
	}
	if want := []string{"alpha/annotated", "alpha/none", "alpha/bad"}; strings.Join(asked, " ") != strings.Join(want, " ") {
		t.Errorf("the source was asked for %v, want %v (not when arguments came)", asked, want)
	}
}
