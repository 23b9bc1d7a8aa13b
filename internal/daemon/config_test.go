package daemon

import (
	"strings"
	"testing"

	"github.com/gvswitch/gvs/sdn"
)

const goodConfig = `{
  "nodeName": "n1", "nodeIP": "192.168.240.11", "subnet": "10.128.0.0/23",
  "mode": "multitenant", "clusterNetworks": ["10.128.0.0/14"], "serviceNetwork": "172.30.0.0/16",
  "projects": {"alpha": 10},
  "peers": [{"name": "n2", "ip": "192.168.240.12", "subnet": "10.128.2.0/23"}]
}`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Node()
	if err != nil {
		t.Fatal(err)
	}
	if n.Mode != sdn.ModeMultitenant || n.MTU != 1450 || n.Subnet.String() != "10.128.0.0/23" {
		t.Errorf("node config = %+v", n)
	}
	bad := []struct{ name, json, want string }{
		{"not json", `{`, "unexpected EOF"},
		{"unknown key", `{"nodeName":"n1","subnett":"x"}`, "unknown field"},
		{"bad ip", strings.Replace(goodConfig, "192.168.240.11", "192.168.240", 1), "nodeIP"},
		{"bad subnet", strings.Replace(goodConfig, "10.128.0.0/23", "10.128.0.0/33", 1), "subnet"},
		{"bad mode", strings.Replace(goodConfig, "multitenant", "flat", 1), "flat"},
		{"subnet outside the cluster", strings.Replace(goodConfig, `"10.128.0.0/23"`, `"10.200.0.0/23"`, 1), "10.200.0.0/23"},
	}
	for _, b := range bad {
		_, err := ParseConfig([]byte(b.json))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: error %v, want one mentioning %q", b.name, err, b.want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte(`{"mode":"subnet"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if _, err := c.Node(); err != nil {
			t.Fatalf("ParseConfig accepted a config whose Node() fails: %v", err)
		}
	})
}
