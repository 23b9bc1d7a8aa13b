package netns

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/gvswitch/gvs/lab/cluster"
)

// EgressIPResult is what the egress IP step saw: alpha was given the
// egress IP IP, hosted by node Node; an alpha pod on the other node sent
// to the external host.
type EgressIPResult struct {
	IP   netip.Addr
	Node string
	// Alpha is the alpha pod that sent, AlphaSeenAs the source address the
	// external host saw from it (host:port; "" when it did not arrive).
	Alpha       cluster.Pod
	AlphaSeenAs string
	// Beta is a beta pod on the same node as Alpha, BetaSeenAs what the
	// host saw from it: its node's address (beta has no egress IP).
	Beta       cluster.Pod
	BetaSeenAs string
	// BackToNode: with the egress IP removed again, alpha's pod was seen
	// with its node's address.
	BackToNode bool
}

// egressIP shows a project's egress IP (OpenShift's NetNamespace and
// HostSubnet egressIPs, docs/openshift-rules.md "Egress IPs"): alpha gets
// Underlay+150, hosted by n2; alpha's pod on n1 leaves the cluster from it
// (table 101 tunnels it to n2, which source-NATs it), while beta's pod on
// n1 still leaves from n1's address. The egress IP is removed at the end,
// so the later steps (and the cluster left running) see plain NAT egress.
func (r *run) egressIP(ctx context.Context) {
	c := r.c
	res := &r.res.EgressIP
	b := c.Lab.Underlay.Masked().Addr().As4()
	b[3] = 150
	res.IP, res.Node = netip.AddrFrom4(b), c.Nodes[1].Name
	res.Alpha, res.Beta = c.Nodes[0].Pods[1], c.Nodes[0].Pods[2]
	n1 := c.Nodes[0].IP
	ctl := func(args ...string) bool {
		r.printf("    gvsctl %s\n", strings.Join(args, " "))
		var err error
		var out []byte
		if c.Kube != nil {
			out, err = c.KubeCtl(ctx, args...)
		} else {
			out, err = c.RegistryCtl(ctx, args...)
		}
		if err != nil {
			r.fail(fmt.Sprintf("gvsctl %s: %v\n%s", strings.Join(args, " "), err, out))
		}
		return err == nil
	}
	r.step(fmt.Sprintf("egress IP: project alpha leaves the cluster from %s, hosted by %s", res.IP, res.Node))
	if !ctl("egress-ip", "project", "alpha", res.IP.String()) || !ctl("egress-ip", "node", res.Node, res.IP.String()) {
		return
	}
	srv, err := r.startServer(ctx, c.Lab.External.NS, "ext-eip.log", 5202)
	if err != nil {
		r.fail(err.Error())
		return
	}
	defer srv.Stop()
	// seen returns the source address the external host saw from p ("":
	// the connection failed).
	seen := func(p cluster.Pod) string {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, p.NS, r.bench(), "tcp-client", "-c", c.Lab.External.IP.String()+":5202", "-bytes", "10000")
		if err != nil {
			return ""
		}
		t, err := ParseTransfer(out)
		if err != nil || !t.Intact {
			return ""
		}
		return t.SeenAs
	}
	// The nodes follow the control plane within a fraction of a second.
	start := time.Now()
	if eventually(ctx, 20*time.Second, 100*time.Millisecond, func() bool { res.AlphaSeenAs = seen(res.Alpha); return seenFrom(res.AlphaSeenAs, res.IP) }) {
		r.printf("    %s (alpha) on %s: the external host sees %s — the egress IP, not %s's %s (through VXLAN to %s; within %v)\n",
			res.Alpha.Name, c.Nodes[0].Name, res.AlphaSeenAs, c.Nodes[0].Name, n1, res.Node, time.Since(start).Round(time.Millisecond))
	} else {
		r.fail(fmt.Sprintf("egress IP: the external host saw alpha's %s as %q, want %s", res.Alpha.Name, res.AlphaSeenAs, res.IP))
	}
	res.BetaSeenAs = seen(res.Beta)
	if seenFrom(res.BetaSeenAs, n1) {
		r.printf("    %s (beta) on %s: the external host sees %s — its node's address (beta has no egress IP)\n", res.Beta.Name, c.Nodes[0].Name, res.BetaSeenAs)
	} else {
		r.fail(fmt.Sprintf("egress IP: the external host saw beta's %s as %q, want its node %s", res.Beta.Name, res.BetaSeenAs, n1))
	}

	r.step("egress IP removed (the demo leaves none)")
	if !ctl("egress-ip", "project", "alpha") || !ctl("egress-ip", "node", res.Node) {
		return
	}
	var got string
	if eventually(ctx, 20*time.Second, 100*time.Millisecond, func() bool { got = seen(res.Alpha); return seenFrom(got, n1) }) {
		res.BackToNode = true
		r.printf("    %s (alpha): the external host sees %s again\n", res.Alpha.Name, got)
	} else {
		r.fail(fmt.Sprintf("egress IP removed: the external host saw alpha's %s as %q, want its node %s", res.Alpha.Name, got, n1))
	}
}
