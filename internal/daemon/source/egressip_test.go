package source

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/sdn"
)

func ips(ss ...string) []netip.Addr {
	out, err := ParseEgressIPs(ss)
	if err != nil {
		panic(err)
	}
	return out
}

// egressText prints a project's egress IPs as the fake node has them:
// "ip@node" (a remote, with its address), "ip@local", or "ip@-" (nobody).
func egressText(hosts []sdn.EgressIPHost) string {
	var out []string
	for _, h := range hosts {
		switch {
		case h.Local:
			out = append(out, h.IP.String()+"@local")
		case h.NodeIP.IsValid():
			out = append(out, fmt.Sprintf("%v@%s(%v)", h.IP, h.Node, h.NodeIP))
		default:
			out = append(out, h.IP.String()+"@-")
		}
	}
	return strings.Join(out, " ")
}

// TestMirrorEgressIPs: an egress IP is served by the node naming it while
// that node is this one or an accepted remote; conflicts (two projects, two
// nodes, a node's own address) are served by nobody; a project's record
// going away reaches the node as nil.
func TestMirrorEgressIPs(t *testing.T) {
	f := newFakeNode("10.128.0.0/23")
	m := newTestMirror(f)
	want := func(step, project, text string) {
		t.Helper()
		if got := egressText(f.eips[project]); got != text {
			t.Errorf("%s: %s has %q, want %q", step, project, got, text)
		}
	}
	m.SetProjectEgressIPs("alpha", ips("192.168.1.50", "192.168.1.51"))
	want("no node hosts them", "alpha", "192.168.1.50@- 192.168.1.51@-")
	m.SetNodeEgressIPs("n2", ips("192.168.1.50"))
	want("n2 names one, but is not known", "alpha", "192.168.1.50@- 192.168.1.51@-")
	m.SetRemote(remote("n2", "192.168.1.12", "10.128.2.0/23"))
	want("n2 known", "alpha", "192.168.1.50@n2(192.168.1.12) 192.168.1.51@-")
	m.SetNodeEgressIPs(self, ips("192.168.1.51"))
	want("this node hosts the second", "alpha", "192.168.1.50@n2(192.168.1.12) 192.168.1.51@local")
	m.RemoveRemote("n2")
	want("n2 gone", "alpha", "192.168.1.50@- 192.168.1.51@local")
	m.SetRemote(remote("n2", "192.168.1.12", "10.128.2.0/23"))
	m.SetNodeEgressIPs("n3", ips("192.168.1.50"))
	want("two nodes name it", "alpha", "192.168.1.50@- 192.168.1.51@local")
	m.SetNodeEgressIPs("n3", nil)
	m.SetProjectEgressIPs("beta", ips("192.168.1.50"))
	want("two projects name it", "alpha", "192.168.1.50@- 192.168.1.51@local")
	want("two projects name it", "beta", "192.168.1.50@-")
	m.SetProjectEgressIPs("beta", ips("192.168.1.12"))
	m.SetNodeEgressIPs(self, ips("192.168.1.51", "192.168.1.12"))
	want("a node's address", "beta", "192.168.1.12@-")
	want("beta let go", "alpha", "192.168.1.50@n2(192.168.1.12) 192.168.1.51@local")
	m.SetProjectEgressIPs("beta", nil)
	if _, has := f.eips["beta"]; has {
		t.Errorf("beta's egress IPs not removed: %v", f.eips["beta"])
	}
	if _, err := ParseEgressIPs([]string{"192.168.1.1", "nonsense", "::1"}); err == nil {
		t.Error("ParseEgressIPs took nonsense")
	}
}
