package e2e

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// TestEgressIPAutoKube: automatic assignment in Kubernetes mode
// (HostSubnet egressCIDRs, sdn/kube/egressip.go), the same walk as
// TestEgressIPAuto made deterministic:
//
//  1. gvs-node's credentials cannot write a HostSubnet's egressIPs (a
//     stolen node credential cannot move an egress IP to its node).
//  2. alpha names an egress IP and no node has egress CIDRs: nothing
//     hosts it; alpha's outbound traffic is dropped, never seen by the
//     external host; beta unaffected.
//  3. Node 2 gets egress CIDRs: gvs-master writes the IP into its
//     HostSubnet; alpha's pods on both nodes leave from it.
//  4. Node 1 gets egress CIDRs too: the IP stays on node 2.
//  5. Node 2's gvs-switchd stops: its tun0 no longer answers gvs-master's
//     probe, the IP moves to node 1 and alpha's traffic resumes from it.
func TestEgressIPAutoKube(t *testing.T) {
	kubetest.Require(t)
	c := up(t, "eg5k", egressIPSpec(cluster.ControlPlaneKube))
	if err := c.RefreshVNIDs(ctx(t)); err != nil {
		t.Fatal(err)
	}
	net, err := networkv1.NewForConfig(c.Kube.Admin())
	if err != nil {
		t.Fatal(err)
	}
	n1, n2 := c.Nodes[0], c.Nodes[1]
	alpha1, alpha2, beta1, beta2 := n1.Pods[1], n2.Pods[1], n1.Pods[2], n2.Pods[2]
	under := netip.PrefixFrom(n1.IP, 24).Masked()
	b := under.Addr().As4()
	b[3] = 160
	eip := netip.AddrFrom4(b)
	hosted := func(node string) []string {
		hs, err := net.HostSubnets().Get(ctx(t), node)
		if err != nil {
			t.Errorf("HostSubnet %s: %v", node, err)
			return nil
		}
		return hs.EgressIPs
	}
	update := func(what string, fn func() error) {
		t.Helper()
		if err := testutil.Poll(10*time.Second, what, func() (bool, error) { return fn() == nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
	setCIDRs := func(node string, cidrs ...string) {
		t.Helper()
		update("egressCIDRs of "+node, func() error {
			hs, err := net.HostSubnets().Get(ctx(t), node)
			if err != nil {
				return err
			}
			hs.EgressCIDRs = cidrs
			_, err = net.HostSubnets().Update(ctx(t), hs)
			return err
		})
	}

	// 1. The node's account may read HostSubnets, not write them.
	nodeCfg, err := c.Kube.ServiceAccountConfig(ctx(t), "gvs", "gvs-node")
	if err != nil {
		t.Fatal(err)
	}
	asNode, err := networkv1.NewForConfig(nodeCfg)
	if err != nil {
		t.Fatal(err)
	}
	if hs, err := asNode.HostSubnets().Get(ctx(t), n1.Name); err != nil {
		t.Errorf("gvs-node cannot read its HostSubnet: %v", err)
	} else {
		hs.EgressIPs, hs.EgressCIDRs = []string{eip.String()}, []string{under.String()}
		if _, err := asNode.HostSubnets().Update(ctx(t), hs); !apierrors.IsForbidden(err) {
			t.Errorf("gvs-node's credentials wrote the egress IPs of HostSubnet %s: %v (want forbidden)", n1.Name, err)
		}
	}

	// 2. Named, hosted by nobody: dropped.
	expect, srvLog := egressIPServer(t, c)
	update("egressIPs of alpha", func() error {
		nn, err := net.NetNamespaces().Get(ctx(t), "alpha")
		if err != nil {
			return err
		}
		nn.EgressIPs = []string{eip.String()}
		_, err = net.NetNamespaces().Update(ctx(t), nn)
		return err
	})
	logLen := func() int { b, _ := os.ReadFile(srvLog); return strings.Count(string(b), "tcp client") }
	before := logLen()
	expect("no egress node", map[*cluster.Pod]netip.Addr{&alpha1: {}, &alpha2: {}})
	if n := logLen() - before; n != 0 {
		t.Errorf("the external host saw %d connections while alpha's egress was to be dropped", n)
	}
	expect("no egress node: beta unaffected", map[*cluster.Pod]netip.Addr{&beta1: n1.IP, &beta2: n2.IP})

	// 3. Node 2 may host it.
	setCIDRs(n2.Name, under.String())
	if !testutil.Eventually(20*time.Second, func() bool { return slices.Equal(hosted(n2.Name), []string{eip.String()}) }) {
		t.Fatalf("gvs-master did not assign %v to %s: %v", eip, n2.Name, hosted(n2.Name))
	}
	expect("assigned to node 2", map[*cluster.Pod]netip.Addr{&alpha1: eip, &alpha2: eip, &beta1: n1.IP})
	if !nodeHolds(t, c, 1, eip) {
		t.Errorf("%s does not hold %v", n2.Name, eip)
	}

	// 4. Node 1 may too: the IP stays where it is.
	setCIDRs(n1.Name, under.String())
	time.Sleep(2 * time.Second) // a probe round and an assignment, had they moved it
	if got := hosted(n1.Name); len(got) != 0 {
		t.Errorf("a node with room took %v from a live node: %v", eip, got)
	}

	// 5. Node 2 stops: the IP moves to node 1.
	start := time.Now()
	if err := c.StopDaemon(1); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(30*time.Second, func() bool { return slices.Equal(hosted(n1.Name), []string{eip.String()}) }) {
		t.Fatalf("%v not moved to %s after %s stopped: %s has %v, %s has %v", eip, n1.Name, n2.Name,
			n1.Name, hosted(n1.Name), n2.Name, hosted(n2.Name))
	}
	moved := time.Since(start)
	if got := hosted(n2.Name); len(got) != 0 {
		t.Errorf("the stopped node still names %v", got)
	}
	expect("moved to node 1", map[*cluster.Pod]netip.Addr{&alpha1: eip, &beta1: n1.IP})
	t.Logf("egress IP moved %v after the hosting node's gvs-switchd stopped; traffic resumed after %v",
		moved.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	if !nodeHolds(t, c, 0, eip) {
		t.Errorf("%s does not hold %v after the move", n1.Name, eip)
	}
}
