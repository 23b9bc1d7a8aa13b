package kube

import (
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/master"
)

// TestRampHostSubnets: HostSubnets an administrator makes for hosts that
// are not nodes (OpenShift's F5 "ramp"), with the assign-subnet
// annotation and no subnet, get one from the nodes' allocator, the
// annotation removed and fixed-vnid-host kept; deleting one releases its
// subnet. One with an unparsable fixed-vnid-host, or another HostSubnet's
// hostIP, gets none. The cluster network has room for four subnets, so
// that the release is seen: the fifth host gets the freed one.
func TestRampHostSubnets(t *testing.T) {
	e := newEnv(t, "rp")
	n := testNetwork()
	n.ClusterNetworks = []master.ClusterNetwork{{CIDR: netip.MustParsePrefix("10.1.0.0/24"), HostSubnetLength: 6}}
	want := expectedSubnets(t, n, 4)
	m, _ := e.startMaster("m1", n)
	testutil.WaitFor(t, 10*time.Second, "master leading", func() (bool, error) { return m.Leading(), nil })

	e.createNode("node1", "192.168.50.1")
	testutil.WaitFor(t, 5*time.Second, "node1's HostSubnet", func() (bool, error) { return e.subnets()["node1"] == want[0], nil })

	ramp := func(name, ip string, annotations map[string]string) {
		t.Helper()
		a := map[string]string{networkv1.AssignSubnetAnnotation: "true"}
		for k, v := range annotations {
			a[k] = v
		}
		hs := &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: a}, Host: name, HostIP: ip}
		if _, err := e.net.HostSubnets().Create(e.ctx(), hs); err != nil {
			t.Fatal(err)
		}
	}
	ramp("f5-a", "192.168.60.1", map[string]string{networkv1.FixedVNIDHostAnnotation: "10"})
	testutil.WaitFor(t, 5*time.Second, "f5-a's subnet", func() (bool, error) { return e.subnets()["f5-a"] != "", nil })
	hs, err := e.net.HostSubnets().Get(e.ctx(), "f5-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, pending := hs.Annotations[networkv1.AssignSubnetAnnotation]; pending || hs.Subnet != want[1] || hs.HostIP != "192.168.60.1" ||
		hs.Annotations[networkv1.FixedVNIDHostAnnotation] != "10" || hs.Annotations[networkv1.NodeUIDAnnotation] != "" {
		t.Fatalf("f5-a = subnet %q hostIP %q annotations %v; want subnet %s, assign-subnet removed, fixed-vnid-host 10 kept, no node UID",
			hs.Subnet, hs.HostIP, hs.Annotations, want[1])
	}

	// Refused: a fixed VNID that is not one, a hostIP another HostSubnet has.
	before := e.logs.count("HostSubnet refused", "hostsubnet=f5-bad")
	beforeDup := e.logs.count("HostSubnet refused", "hostsubnet=f5-dup")
	ramp("f5-bad", "192.168.60.2", map[string]string{networkv1.FixedVNIDHostAnnotation: "16777216"})
	ramp("f5-dup", "192.168.50.1", nil)
	testutil.WaitFor(t, 10*time.Second, "the master to refuse f5-bad and f5-dup", func() (bool, error) {
		return e.logs.count("HostSubnet refused", "hostsubnet=f5-bad") > before && e.logs.count("HostSubnet refused", "hostsubnet=f5-dup") > beforeDup, nil
	})
	if s := e.subnets(); s["f5-bad"] != "" || s["f5-dup"] != "" {
		t.Fatalf("refused HostSubnets got subnets: %v", s)
	}

	// Without a fixed VNID (a host treated as a node), then the network full.
	ramp("f5-b", "192.168.60.3", nil)
	ramp("f5-c", "192.168.60.4", nil)
	testutil.WaitFor(t, 5*time.Second, "f5-b's and f5-c's subnets", func() (bool, error) {
		s := e.subnets()
		return s["f5-b"] != "" && s["f5-c"] != "", nil
	})
	if s := e.subnets(); s["f5-b"] == s["f5-c"] || (s["f5-b"] != want[2] && s["f5-b"] != want[3]) || (s["f5-c"] != want[2] && s["f5-c"] != want[3]) {
		t.Fatalf("subnets %v: want f5-b and f5-c to get %s and %s", s, want[2], want[3])
	}
	ramp("f5-d", "192.168.60.5", nil)
	testutil.WaitFor(t, 10*time.Second, "the master to find the network full", func() (bool, error) {
		return e.logs.count("sync failed", "name=f5-d", "no free subnet") > 0, nil
	})

	// Deleting a ramp's HostSubnet releases its subnet: f5-d gets it.
	if err := e.net.HostSubnets().Delete(e.ctx(), "f5-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "f5-d gets f5-a's released subnet", func() (bool, error) { return e.subnets()["f5-d"] == want[1], nil })
}
