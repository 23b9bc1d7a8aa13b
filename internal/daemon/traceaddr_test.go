package daemon

import (
	"strings"
	"testing"

	"github.com/gvswitch/gvs/sdn/pki"
)

// TestTraceAddr: the trace endpoint listens on nodeIP:9447 by default
// only for a node with a certificate for it (traceTLS, or a registry
// node's etcdTLS); "off" and a missing certificate mean none; an address
// without a certificate is refused.
func TestTraceAddr(t *testing.T) {
	tls := pki.Files{CA: "ca.crt", Cert: "tls.crt", Key: "tls.key"}
	reg := []string{"https://192.0.2.1:2379"}
	for name, x := range map[string]struct {
		c    Config
		want string
	}{
		"registry with a certificate": {Config{EtcdEndpoints: reg, EtcdTLS: tls, NodeIP: "192.0.2.11"}, "192.0.2.11:9447"},
		"given":                       {Config{EtcdEndpoints: reg, EtcdTLS: tls, NodeIP: "192.0.2.11", TraceAddr: "192.0.2.11:19447"}, "192.0.2.11:19447"},
		"off":                         {Config{EtcdEndpoints: reg, EtcdTLS: tls, NodeIP: "192.0.2.11", TraceAddr: "off"}, ""},
		"insecure registry":           {Config{EtcdEndpoints: reg, EtcdInsecure: true, NodeIP: "192.0.2.11"}, ""},
		"no registry":                 {Config{NodeIP: "192.0.2.11"}, ""},
		"given without a certificate": {Config{NodeIP: "192.0.2.11", TraceAddr: "192.0.2.11:9447"}, ""},
		"kubernetes with traceTLS":    {Config{Kubeconfig: "/etc/gvs/kubeconfig", TraceTLS: tls, NodeIP: "192.0.2.11"}, "192.0.2.11:9447"},
		"kubernetes without traceTLS": {Config{Kubeconfig: "/etc/gvs/kubeconfig", NodeIP: "192.0.2.11"}, ""},
	} {
		if got := x.c.traceAddr(); got != x.want {
			t.Errorf("%s: %q, want %q", name, got, x.want)
		}
	}
	c := Config{NodeIP: "192.0.2.11", TraceAddr: "192.0.2.11:9447"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "traceAddr needs traceTLS or etcdTLS") {
		t.Errorf("traceAddr without etcdTLS: %v", err)
	}
	c = Config{EtcdTLS: tls, TraceAddr: "192.0.2.11"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "traceAddr") {
		t.Errorf("traceAddr without a port: %v", err)
	}
}
