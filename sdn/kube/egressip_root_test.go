package kube

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// TestEgressAssignment: gvs-master, as the gvs-master ServiceAccount (so
// deploy/rbac.yaml is proven to suffice), places the NetNamespaces' egress
// IPs on the HostSubnets with egressCIDRs, the probe off (every such node
// reachable; the probe itself is internal/e2e's TestEgressIPAutoKube):
//
//  1. alpha's two egress IPs go to n1, the one node with CIDRs; an IP a
//     HostSubnet without CIDRs names (manual) stays there only.
//  2. n2 gets CIDRs: alpha's stay on n1; beta's goes to n2 (the fewest);
//     one outside every range is placed nowhere.
//  3. n1's CIDRs removed: what gvs-master placed there moves to n2.
//  4. n2's Node deleted: nothing can host them; no HostSubnet names
//     them (the nodes then drop the projects' outbound traffic).
func TestEgressAssignment(t *testing.T) {
	e := newEnv(t, "eg")
	e.egressCheck = -1
	e.createNS("alpha", "beta")
	m, _ := e.startMaster("m1", testNetwork())
	testutil.WaitFor(t, 10*time.Second, "master leading", func() (bool, error) { return m.Leading(), nil })
	for i, n := range []string{"n1", "n2", "n3"} {
		e.createNode(n, fmt.Sprintf("192.168.50.%d", i+1))
	}
	e.waitNetNamespaces(10*time.Second, "alpha", "beta")
	testutil.WaitFor(t, 10*time.Second, "the HostSubnets", func() (bool, error) { return len(e.subnets()) == 3, nil })

	update := func(name string, hs bool, fn func(hs *networkv1.HostSubnet, nn *networkv1.NetNamespace)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if hs {
				o, err := e.net.HostSubnets().Get(e.ctx(), name)
				if err != nil {
					return err
				}
				fn(o, nil)
				_, err = e.net.HostSubnets().Update(e.ctx(), o)
				return err
			}
			o, err := e.net.NetNamespaces().Get(e.ctx(), name)
			if err != nil {
				return err
			}
			fn(nil, o)
			_, err = e.net.NetNamespaces().Update(e.ctx(), o)
			return err
		})
		if err != nil {
			t.Fatalf("updating %s: %v", name, err)
		}
	}
	cidrs := func(node string, cs ...string) {
		update(node, true, func(hs *networkv1.HostSubnet, _ *networkv1.NetNamespace) { hs.EgressCIDRs = cs })
	}
	// hosted returns every HostSubnet's egressIPs, by name (none: absent).
	hosted := func() map[string][]string {
		l, err := e.net.HostSubnets().List(e.ctx(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, hs := range l.Items {
			if len(hs.EgressIPs) > 0 {
				out[hs.Name] = hs.EgressIPs
			}
		}
		return out
	}
	expect := func(step string, ok func(map[string][]string) bool) {
		t.Helper()
		var got map[string][]string
		if !testutil.Eventually(10*time.Second, func() bool { got = hosted(); return ok(got) }) {
			t.Errorf("%s: HostSubnets' egressIPs %v", step, got)
		}
	}

	update("n3", true, func(hs *networkv1.HostSubnet, _ *networkv1.NetNamespace) { hs.EgressIPs = []string{"192.168.60.9"} })
	cidrs("n1", "192.168.60.0/24")
	update("alpha", false, func(_ *networkv1.HostSubnet, nn *networkv1.NetNamespace) {
		nn.EgressIPs = []string{"192.168.60.1", "192.168.60.2", "192.168.60.9"}
	})
	expect("alpha's on n1", func(got map[string][]string) bool {
		return slices.Equal(got["n1"], []string{"192.168.60.1", "192.168.60.2"}) && slices.Equal(got["n3"], []string{"192.168.60.9"}) && len(got) == 2
	})
	cidrs("n2", "192.168.60.0/25")
	update("beta", false, func(_ *networkv1.HostSubnet, nn *networkv1.NetNamespace) {
		nn.EgressIPs = []string{"192.168.60.3", "172.16.0.1"}
	})
	auto := []string{"192.168.60.1", "192.168.60.2", "192.168.60.3"}
	expect("beta's on n2 (the fewest), alpha's kept", func(got map[string][]string) bool {
		return slices.Equal(got["n1"], auto[:2]) && slices.Equal(got["n2"], auto[2:]) &&
			slices.Equal(got["n3"], []string{"192.168.60.9"}) && len(got) == 3
	})
	if hs, err := e.net.HostSubnets().Get(e.ctx(), "n1"); err != nil || hs.Annotations[AssignedEgressIPsAnnotation] != "192.168.60.1,192.168.60.2" {
		t.Errorf("n1's %s: %v (%v)", AssignedEgressIPsAnnotation, hs.Annotations, err)
	}
	cidrs("n1")
	expect("n1's CIDRs removed", func(got map[string][]string) bool {
		return slices.Equal(got["n2"], auto) && len(got["n1"]) == 0 && len(got["n3"]) == 1
	})

	if err := e.admin.CoreV1().Nodes().Delete(e.ctx(), "n2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("n2 gone", func(got map[string][]string) bool {
		return slices.Equal(slices.Sorted(maps.Keys(got)), []string{"n3"})
	})
}
