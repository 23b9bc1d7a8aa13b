package node_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/sdn"
)

// TestRampRemote: a host with a fixed VNID is a remote like a node (its
// VXLAN accepted, its rules under its node cookie) but gets no copy of
// multicast (table 111: a project's multicast would reach it with its own
// VNI); a change of its fixed VNID, or to none, replaces its rules;
// removing it removes them all.
func TestRampRemote(t *testing.T) {
	p, table, peers := newProgram(t, nil)
	node2 := netip.MustParseAddr("192.168.0.2")
	if err := p.AddRemote(sdn.RemoteNode{Name: "n2", IP: node2, Subnet: netip.MustParsePrefix("10.128.2.0/23")}); err != nil {
		t.Fatal(err)
	}
	fanout := func() string {
		var out []string
		for _, r := range table.Rules() {
			if r.Cookie == sdn.MulticastFanoutCookie {
				out = append(out, r.String())
			}
		}
		return strings.Join(out, "\n")
	}
	ip := netip.MustParseAddr("192.168.0.50")
	ramp := sdn.RemoteNode{Name: "f5", IP: ip, Subnet: netip.MustParsePrefix("10.130.0.0/23"), FixedVNID: 12, HasFixedVNID: true}
	c := sdn.NodeCookie(ip)
	steps := []struct {
		what string
		rn   sdn.RemoteNode
		want int
	}{
		{"fixed VNID 12 (multitenant: two sources per table)", ramp, 5},
		{"fixed VNID 0 (global)", sdn.RemoteNode{Name: "f5", IP: ip, Subnet: ramp.Subnet, HasFixedVNID: true}, 3},
		{"no fixed VNID (a node)", sdn.RemoteNode{Name: "f5", IP: ip, Subnet: ramp.Subnet}, 3},
		{"fixed VNID 12 again", ramp, 5},
	}
	for _, s := range steps {
		if err := p.AddRemote(s.rn); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		want, err := sdn.NodeRules(testNode(), s.rn)
		if err != nil {
			t.Fatal(err)
		}
		if got := count(table, c); got != s.want || len(want) != s.want {
			t.Errorf("%s: %d rules under the host's cookie (generator: %d), want %d", s.what, got, len(want), s.want)
		}
		for _, w := range want {
			found := false
			for _, r := range table.Rules() {
				if r.Equal(w) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: rule %s not installed", s.what, w)
			}
		}
		if !peers.ips[ip] {
			t.Errorf("%s: the host's VXLAN is not accepted", s.what)
		}
		f := fanout()
		if !strings.Contains(f, node2.String()+"->tun_dst") || strings.Contains(f, ip.String()+"->tun_dst") != !s.rn.HasFixedVNID {
			t.Errorf("%s: table 111 (the host gets multicast only without a fixed VNID):\n%s", s.what, f)
		}
	}
	if err := p.RemoveRemote(ip); err != nil {
		t.Fatal(err)
	}
	if n := count(table, c); n != 0 || peers.ips[ip] {
		t.Errorf("after RemoveRemote: %d rules, peer %v", n, peers.ips[ip])
	}
	big := ramp
	big.FixedVNID = sdn.MaxVNID + 1
	if err := p.AddRemote(big); err == nil {
		t.Error("a fixed VNID past 24 bits was accepted")
	}
}
