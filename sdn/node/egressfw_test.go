package node_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
)

// egressVerdict traces a TCP packet from a local pod to dst through the
// table: "tun0" (out through NAT egress) or "drop".
func egressVerdict(t *testing.T, table *flowtable.Table, pod sdn.Pod, dst string) string {
	t.Helper()
	f, o, err := flowtable.ParseTrace(fmt.Sprintf("in_port=%d,tcp,nw_src=%s,nw_dst=%s,tp_dst=443,ct_next=+trk+new,ct_next=+trk+new", pod.Port, pod.IP, dst))
	if err != nil {
		t.Fatal(err)
	}
	tr := table.Snapshot().TraceWith(f, o)
	outs := tr.Outputs()
	for _, r := range tr.Recirc {
		outs = append(outs, r.Out...)
	}
	if len(outs) == 1 && outs[0].Port == sdn.PortTun0 {
		return "tun0"
	}
	if len(outs) == 0 {
		return "drop"
	}
	return fmt.Sprint(outs)
}

// TestEgressFirewall: a project's egress firewall applies to its pods'
// traffic leaving the cluster, first match wins, other projects are not
// affected; an ambiguous firewall (joined projects with one each) denies
// all; the firewall follows the project's VNID.
func TestEgressFirewall(t *testing.T) {
	p, table, _ := newProgram(t, map[string]uint32{"alpha": 10, "beta": 11})
	a := sdn.Pod{Name: "a", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.2"), Port: sdn.FirstPodPort}
	b := sdn.Pod{Name: "b", Namespace: "beta", IP: netip.MustParseAddr("10.128.0.3"), Port: sdn.FirstPodPort + 1}
	for _, pod := range []sdn.Pod{a, b} {
		if _, err := p.AddPod(pod); err != nil {
			t.Fatal(err)
		}
	}
	pf := func(s string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(s)} }
	check := func(step string, pod sdn.Pod, dst, want string) {
		t.Helper()
		if got := egressVerdict(t, table, pod, dst); got != want {
			t.Errorf("%s: %s → %s: %s, want %s", step, pod.Name, dst, got, want)
		}
	}
	check("no firewall", a, "8.8.8.8", "tun0")
	if err := p.SetEgressFirewall("alpha", "default", []sdn.EgressRule{
		{Allow: true, To: pf("8.8.8.8/32")},
		{Allow: false, To: pf("8.8.0.0/16")},
		{Allow: false, To: []netip.Prefix{netip.MustParsePrefix("1.1.1.1/32"), netip.MustParsePrefix("1.0.0.1/32")}}, // a DNS name's addresses
	}); err != nil {
		t.Fatal(err)
	}
	check("firewall", a, "8.8.8.8", "tun0") // first match wins
	check("firewall", a, "8.8.4.4", "drop")
	check("firewall", a, "1.0.0.1", "drop")
	check("firewall", a, "9.9.9.9", "tun0") // no rule matches
	check("firewall", b, "8.8.4.4", "tun0") // another project
	if err := p.SetEgressFirewall("alpha", "second", []sdn.EgressRule{{Allow: true, To: pf("0.0.0.0/0")}}); err != nil {
		t.Fatal(err)
	}
	check("two objects in one namespace", a, "9.9.9.9", "drop")
	if err := p.DeleteEgressFirewall("alpha", "second"); err != nil {
		t.Fatal(err)
	}
	check("back to one", a, "9.9.9.9", "tun0")
	// beta, with a firewall of its own, joins alpha's VNID: ambiguous.
	if err := p.SetEgressFirewall("beta", "default", []sdn.EgressRule{{Allow: true, To: pf("0.0.0.0/0")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetProjectVNID("beta", 10); err != nil {
		t.Fatal(err)
	}
	check("joined", a, "9.9.9.9", "drop")
	check("joined", b, "9.9.9.9", "drop")
	// beta isolated again: each has its own.
	if _, err := p.SetProjectVNID("beta", 12); err != nil {
		t.Fatal(err)
	}
	check("isolated", a, "8.8.4.4", "drop")
	check("isolated", b, "8.8.4.4", "tun0")
	if err := p.DeleteEgressFirewall("alpha", "default"); err != nil {
		t.Fatal(err)
	}
	check("deleted", a, "8.8.4.4", "tun0")
	if n := count(table, sdn.EgressFirewallCookie(10)); n != 0 {
		t.Errorf("%d firewall rules left for VNID 10", n)
	}
}
