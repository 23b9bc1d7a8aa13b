package daemon

import (
	"net/netip"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/daemon/pods"
	"github.com/gvswitch/gvs/ipfix"
)

// TestIPFIXConfig: Config.IPFIX's checks and defaults, without side
// effects.
func TestIPFIXConfig(t *testing.T) {
	c := &Config{}
	if ic, err := c.ipfixConfig(); ic != nil || err != nil {
		t.Errorf("no ipfix: %v %v, want nil nil", ic, err)
	}
	c.IPFIX = &IPFIXConfig{Collectors: []string{"192.0.2.10:4739"}, ActiveTimeout: "0", IdleTimeout: "2s", ObservationDomain: 3}
	ic, err := c.ipfixConfig()
	if err != nil {
		t.Fatal(err)
	}
	if ic.ActiveTimeout >= 0 || ic.IdleTimeout != 2*time.Second || ic.TemplateRefresh != 0 || ic.Domain != 3 {
		t.Errorf("got %+v: want active off, idle 2s, the default refresh, domain 3", ic)
	}
	for name, x := range map[string]IPFIXConfig{
		"no collectors":     {},
		"a host name":       {Collectors: []string{"collector.example:4739"}},
		"no port":           {Collectors: []string{"192.0.2.10"}},
		"idle not duration": {Collectors: []string{"192.0.2.10:4739"}, IdleTimeout: "soon"},
		"idle too short":    {Collectors: []string{"192.0.2.10:4739"}, IdleTimeout: "10ms"},
		"active too long":   {Collectors: []string{"192.0.2.10:4739"}, ActiveTimeout: "48h"},
		"refresh 0":         {Collectors: []string{"192.0.2.10:4739"}, TemplateRefresh: "0"},
		"negative queue":    {Collectors: []string{"192.0.2.10:4739"}, QueueLength: -1},
		"negative rate":     {Collectors: []string{"192.0.2.10:4739"}, MaxRecordsPerSecond: -5},
	} {
		c := &Config{IPFIX: &x}
		if _, err := c.ipfixConfig(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (&Config{IPFIX: &IPFIXConfig{}}).Validate(); err == nil {
		t.Error("Validate accepted an ipfix section without collectors")
	}
}

// TestPodIndex: the exporter names this node's pods "project/name" with
// their VNIDs, and nothing else.
func TestPodIndex(t *testing.T) {
	var x podIndex
	if _, ok := x.resolve([4]byte{10, 128, 0, 2}); ok {
		t.Error("resolved without a pod list")
	}
	x.setList(func() []pods.Pod {
		return []pods.Pod{{Name: "web", Project: "alpha", IP: netip.MustParseAddr("10.128.0.2"), VNID: 11}}
	})
	if ep, ok := x.resolve([4]byte{10, 128, 0, 2}); !ok || ep != (ipfix.Endpoint{Pod: "alpha/web", VNID: 11}) {
		t.Errorf("resolve: %+v %v", ep, ok)
	}
	if _, ok := x.resolve([4]byte{10, 128, 0, 3}); ok {
		t.Error("resolved an address no pod has")
	}
}
