package node_test

import (
	"fmt"
	"maps"
	"net/netip"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
)

// egressIPVerdict traces a TCP packet from a local pod to an outside
// address: "tun0" (NAT egress), "egress" (tun0 with an egress MAC),
// "vxlan:DST" or "drop".
func egressIPVerdict(t *testing.T, table *flowtable.Table, pod sdn.Pod) string {
	t.Helper()
	f, o, err := flowtable.ParseTrace(fmt.Sprintf("in_port=%d,tcp,nw_src=%s,nw_dst=8.8.8.8,tp_dst=443", pod.Port, pod.IP))
	if err != nil {
		t.Fatal(err)
	}
	outs := table.Snapshot().TraceWith(f, o).Outputs()
	switch {
	case len(outs) == 0:
		return "drop"
	case len(outs) > 1:
		return fmt.Sprint(outs)
	case outs[0].Port == sdn.PortVXLAN:
		return fmt.Sprintf("vxlan:%v", netip.AddrFrom4(outs[0].TunDst))
	case outs[0].Port == sdn.PortTun0 && outs[0].EthDst == sdn.EgressMAC(pod.VNID):
		return "egress"
	case outs[0].Port == sdn.PortTun0:
		return "tun0"
	}
	return fmt.Sprint(outs)
}

// TestEgressIPs: a project's egress IP route follows where its first
// served egress IP lives, fails closed when none is served, follows the
// project's VNID, and a conflict between joined projects drops; the
// hosted egress IPs are what the host side installs.
func TestEgressIPs(t *testing.T) {
	p, table, _ := newProgram(t, map[string]uint32{"alpha": 10, "beta": 11})
	a := sdn.Pod{Name: "a", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.2"), Port: sdn.FirstPodPort}
	b := sdn.Pod{Name: "b", Namespace: "beta", IP: netip.MustParseAddr("10.128.0.3"), Port: sdn.FirstPodPort + 1}
	for _, pod := range []sdn.Pod{a, b} {
		if _, err := p.AddPod(pod); err != nil {
			t.Fatal(err)
		}
	}
	e1, e2 := netip.MustParseAddr("192.168.1.50"), netip.MustParseAddr("192.168.1.51")
	n2 := netip.MustParseAddr("192.168.1.12")
	set := func(project string, hosts ...sdn.EgressIPHost) {
		t.Helper()
		if err := p.SetEgressIPs(project, hosts); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string, pod sdn.Pod, want string, hosted map[netip.Addr]uint32) {
		t.Helper()
		pod, _ = p.Pod(pod.IP)
		if got := egressIPVerdict(t, table, pod); got != want {
			t.Errorf("%s: %s: %s, want %s", step, pod.Name, got, want)
		}
		if got := p.HostedEgressIPs(); !maps.Equal(got, hosted) {
			t.Errorf("%s: hosted %v, want %v", step, got, hosted)
		}
	}
	none := map[netip.Addr]uint32{}
	check("no egress IP", a, "tun0", none)
	set("alpha", sdn.EgressIPHost{IP: e1})
	check("egress IP nobody hosts", a, "drop", none)
	check("another project", b, "tun0", none)
	set("alpha", sdn.EgressIPHost{IP: e1, Node: "n2", NodeIP: n2}, sdn.EgressIPHost{IP: e2, Local: true})
	check("first hosted by n2", a, "vxlan:192.168.1.12", map[netip.Addr]uint32{e2: 10})
	set("alpha", sdn.EgressIPHost{IP: e1}, sdn.EgressIPHost{IP: e2, Local: true})
	check("n2 gone: the second serves", a, "egress", map[netip.Addr]uint32{e2: 10})
	if _, err := p.SetProjectVNID("alpha", 12); err != nil {
		t.Fatal(err)
	}
	check("new VNID", a, "egress", map[netip.Addr]uint32{e2: 12})
	set("beta", sdn.EgressIPHost{IP: netip.MustParseAddr("192.168.1.60"), Local: true})
	if _, err := p.SetProjectVNID("beta", 12); err != nil { // joined, with other egress IPs
		t.Fatal(err)
	}
	check("joined projects disagree", a, "drop", none)
	set("beta")
	check("beta lets go", a, "egress", map[netip.Addr]uint32{e2: 12})
	set("alpha")
	check("removed", a, "tun0", none)
}
