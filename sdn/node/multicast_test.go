package node_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/node"
)

// mcastRules returns the table's multicast rules of VNID v, as text.
func mcastRules(table *flowtable.Table, cookie uint64) []string {
	var out []string
	for _, r := range table.Rules() {
		if r.Cookie == cookie {
			out = append(out, r.String())
		}
	}
	slices.Sort(out)
	return out
}

// wantMcast fails unless VNID v's multicast rules are those of
// sdn.MulticastRules for ports (none: no rules).
func wantMcast(t *testing.T, what string, table *flowtable.Table, v uint32, ports ...uint32) {
	t.Helper()
	rs, err := sdn.MulticastRules(testNode(), v, ports)
	if err != nil {
		t.Fatal(err)
	}
	want := sdn.Text(rs)
	slices.Sort(want)
	if got := mcastRules(table, sdn.MulticastCookie(v)); !slices.Equal(got, want) {
		t.Errorf("%s: VNID %d multicast rules\n%q\nwant\n%q", what, v, got, want)
	}
}

// TestMulticastFollowsPodsAndOptIn: a VNID's multicast rules appear when
// one of its projects opts in, list its local pods as they come and go,
// follow a project that changes VNID (join, isolate) and go when it opts
// out; a VNID no project opted in has none.
func TestMulticastFollowsPodsAndOptIn(t *testing.T) {
	p, table, _ := newProgram(t, map[string]uint32{"default": 0, "alpha": 10, "beta": 11})
	pod := func(name, project string, last byte, port uint32) sdn.Pod {
		return sdn.Pod{Name: name, Namespace: project, IP: netip.AddrFrom4([4]byte{10, 128, 0, last}), Port: port}
	}
	a1, a2, b1 := pod("a1", "alpha", 2, 3), pod("a2", "alpha", 3, 4), pod("b1", "beta", 4, 5)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetMulticast("alpha", true); err != nil {
		t.Fatal(err)
	}
	wantMcast(t, "opted in, no pods", table, 10)
	for _, q := range []sdn.Pod{a1, a2, b1} {
		_, err := p.AddPod(q)
		must(err)
	}
	wantMcast(t, "alpha's pods", table, 10, 3, 4)
	wantMcast(t, "beta did not opt in", table, 11)
	must(p.RemovePod(a1.IP))
	wantMcast(t, "a1 gone", table, 10, 4)

	// beta joins alpha's VNID: its pod is one of VNID 10's now.
	_, err := p.SetProjectVNID("beta", 10)
	must(err)
	wantMcast(t, "beta joined alpha", table, 10, 4, 5)
	wantMcast(t, "beta's old VNID", table, 11)
	// alpha is isolated again (VNID 12): it takes the opt-in along;
	// VNID 10 is beta's alone, which did not opt in.
	_, err = p.SetProjectVNID("alpha", 12)
	must(err)
	wantMcast(t, "alpha isolated", table, 12, 4)
	wantMcast(t, "beta alone in VNID 10", table, 10)

	must(p.SetMulticast("beta", true))
	wantMcast(t, "beta opted in", table, 10, 5)
	if got := p.MulticastProjects(); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Errorf("MulticastProjects = %q", got)
	}
	must(p.SetMulticast("alpha", false))
	wantMcast(t, "alpha opted out", table, 12)
	wantMcast(t, "beta still in", table, 10, 5)

	// A project opted in before it has a VNID gets its rules with it.
	must(p.SetMulticast("gamma", true))
	_, err = p.AddPod(pod("g1", "gamma", 9, 9))
	if err == nil {
		t.Fatal("a pod of a project with no VNID was added")
	}
	_, err = p.SetProjectVNID("gamma", 13)
	must(err)
	_, err = p.AddPod(pod("g1", "gamma", 9, 9))
	must(err)
	wantMcast(t, "gamma", table, 13, 9)
}

// TestMulticastFanoutFollowsRemotes: table 111 copies to every remote
// node, and follows them as they come and go.
func TestMulticastFanoutFollowsRemotes(t *testing.T) {
	p, table, _ := newProgram(t, map[string]uint32{"alpha": 10})
	n2 := sdn.RemoteNode{Name: "n2", IP: netip.MustParseAddr("192.168.0.2"), Subnet: netip.MustParsePrefix("10.128.2.0/23")}
	n3 := sdn.RemoteNode{Name: "n3", IP: netip.MustParseAddr("192.168.0.3"), Subnet: netip.MustParsePrefix("10.128.4.0/23")}
	want := func(what string, ips ...netip.Addr) {
		t.Helper()
		rs, err := sdn.MulticastFanoutRules(testNode(), ips)
		if err != nil {
			t.Fatal(err)
		}
		if got := mcastRules(table, sdn.MulticastFanoutCookie); !slices.Equal(got, sdn.Text(rs)) {
			t.Errorf("%s: table 111 %q, want %q", what, got, sdn.Text(rs))
		}
	}
	want("no remote nodes")
	for _, rn := range []sdn.RemoteNode{n2, n3, n2} {
		if err := p.AddRemote(rn); err != nil {
			t.Fatal(err)
		}
	}
	want("two remote nodes", n2.IP, n3.IP)
	if err := p.RemoveRemote(n2.IP); err != nil {
		t.Fatal(err)
	}
	want("n2 gone", n3.IP)
	// A subnet change that withdraws an overlapping remote takes it out.
	if _, err := p.ChangeSubnet(netip.MustParsePrefix("10.128.4.0/23")); err != nil {
		t.Fatal(err)
	}
	want("n3 overlapped the new subnet")
	if err := p.AddRemote(n2); err != nil {
		t.Fatal(err)
	}
	want("n2 back", n2.IP)
}

// TestMulticastNotInSubnetMode: in subnet mode, as in OpenShift SDN,
// multicast stays dropped whatever projects opt in.
func TestMulticastNotInSubnetMode(t *testing.T) {
	table := flowtable.New(flowtable.Config{})
	cfg := testNode()
	cfg.Mode = sdn.ModeSubnet
	p, err := node.New(node.Config{Table: table, Node: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMulticast("alpha", true); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AddPod(sdn.Pod{Name: "a", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.2"), Port: 3}); err != nil {
		t.Fatal(err)
	}
	if got := mcastRules(table, sdn.MulticastCookie(0)); len(got) != 0 {
		t.Errorf("subnet mode has multicast rules: %q", got)
	}
}
