package master

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
)

// TestAssignEgressIPs: egress IPs spread over the live nodes whose CIDRs
// contain them, stay where they are while they can, move off a node that
// is gone, and stay unassigned when no live node can take them.
func TestAssignEgressIPs(t *testing.T) {
	a := netip.MustParseAddr
	cidr := []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")}
	nodes := map[string]EgressNode{"n1": {CIDRs: cidr, Live: true}, "n2": {CIDRs: cidr, Live: true},
		"n3": {CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}, Live: true}}
	want := []netip.Addr{a("192.168.1.50"), a("192.168.1.51"), a("192.168.1.52"), a("172.16.0.1")}
	got := AssignEgressIPs(want, nodes, nil)
	exp := map[netip.Addr]string{a("192.168.1.50"): "n1", a("192.168.1.51"): "n2", a("192.168.1.52"): "n1"}
	if !maps.Equal(got, exp) {
		t.Fatalf("spread: %v, want %v", got, exp)
	}
	prev := map[netip.Addr]string{a("192.168.1.50"): "n2", a("192.168.1.51"): "n2"}
	if got := AssignEgressIPs(want[:2], nodes, prev); !maps.Equal(got, prev) {
		t.Errorf("kept: %v, want %v", got, prev)
	}
	nodes["n2"] = EgressNode{CIDRs: cidr, Live: false}
	got = AssignEgressIPs(want[:2], nodes, prev)
	if exp := map[netip.Addr]string{a("192.168.1.50"): "n1", a("192.168.1.51"): "n1"}; !maps.Equal(got, exp) {
		t.Errorf("n2 gone: %v, want %v", got, exp)
	}
	nodes["n1"] = EgressNode{CIDRs: cidr, Live: false}
	if got := AssignEgressIPs(want[:2], nodes, prev); len(got) != 0 {
		t.Errorf("no live node: %v, want none", got)
	}
}

// TestPlanEgressIPs: what a node hosts by hand is not placed, an invalid
// or IPv6 entry is not placed, the rest is grouped by node and sorted.
func TestPlanEgressIPs(t *testing.T) {
	a := netip.MustParseAddr
	cidr := ParsePrefixes([]string{"192.168.1.7/24", "bogus", "fd00::/64"})
	if len(cidr) != 1 || cidr[0] != netip.MustParsePrefix("192.168.1.0/24") {
		t.Fatalf("ParsePrefixes: %v", cidr)
	}
	nodes := map[string]EgressNode{"n1": {CIDRs: cidr, Live: true}}
	projects := map[string][]netip.Addr{
		"alpha": ParseAddrs([]string{"192.168.1.52", "junk", "192.168.1.50"}),
		"beta":  {a("192.168.1.51"), a("fd00::1"), {}},
	}
	got := PlanEgressIPs(projects, []netip.Addr{a("192.168.1.51")}, nodes, nil)
	want := []netip.Addr{a("192.168.1.50"), a("192.168.1.52")}
	if len(got) != 1 || !slices.Equal(got["n1"], want) {
		t.Errorf("plan: %v, want n1: %v", got, want)
	}
}
