package console

import (
	"net/netip"
	"testing"
	"time"
)

// TestRates: a pod's rates are its counters' growth since the previous
// read; a new port and counters that restarted get none.
func TestRates(t *testing.T) {
	t0 := time.Now()
	ip := netip.MustParseAddr("10.128.0.2")
	other := netip.MustParseAddr("10.128.0.3")
	prev := View{Read: t0, Pods: []Pod{
		{Node: "a", IP: ip, Traffic: &Traffic{RxBytes: 1000, TxBytes: 500}},
		{Node: "a", IP: other, Traffic: &Traffic{RxBytes: 9000, TxBytes: 9000}},
	}}
	v := View{Read: t0.Add(2 * time.Second), Pods: []Pod{
		{Node: "a", IP: ip, Traffic: &Traffic{RxBytes: 5000, TxBytes: 700}},
		{Node: "a", IP: other, Traffic: &Traffic{RxBytes: 10, TxBytes: 10}},               // restarted
		{Node: "b", IP: ip, Traffic: &Traffic{RxBytes: 100}},                              // another node's pod
		{Node: "a", IP: netip.MustParseAddr("10.128.0.4"), Traffic: &Traffic{RxBytes: 1}}, // new
	}}
	v.rates(prev)
	if got := v.Pods[0].Traffic; got.RxRate != 2000 || got.TxRate != 100 {
		t.Errorf("rates %v / %v, want 2000 / 100 bytes per second", got.RxRate, got.TxRate)
	}
	for _, p := range v.Pods[1:] {
		if p.Traffic.RxRate != 0 || p.Traffic.TxRate != 0 {
			t.Errorf("pod %s on %s: rates %v / %v, want none", p.IP, p.Node, p.Traffic.RxRate, p.Traffic.TxRate)
		}
	}
}
