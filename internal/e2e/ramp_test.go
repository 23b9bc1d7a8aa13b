package e2e

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// TestRampKube: a host that is not a node (OpenShift's F5 BIG-IP "ramp").
// The lab's external host runs a kernel VXLAN device as the ramp, with an
// address in the subnet gvs-master assigns to a HostSubnet made with
// pod.network.openshift.io/assign-subnet (Kubernetes mode, multitenant;
// TestRampRegistry does the first case with `gvsctl hosts add` in etcd
// mode):
//
//   - fixed-vnid-host=alpha's VNID: alpha's pods on both nodes and a global
//     pod reach the ramp, the ramp reaches them; beta's pods do not, either
//     way. The ramp speaking with beta's VNI reaches nobody, and an
//     underlay address that is not the registered one reaches nobody
//     (table 10).
//   - fixed-vnid-host=0: the ramp is global both ways (registered with
//     gvsctl --kubeconfig hosts add).
//   - no fixed VNID: the ramp is a node; its device's VNI is the project
//     it speaks as (alpha here): alpha reaches it, beta does not.
//   - Deleting the HostSubnet removes the rules from every node.
func TestRampKube(t *testing.T) {
	kubetest.Require(t)
	rampTest(t, "rpk", cluster.ControlPlaneKube, true)
}

// TestRampRegistry: the ramp with a fixed VNID in etcd registry mode,
// registered and unregistered with `gvsctl hosts`.
func TestRampRegistry(t *testing.T) {
	rampTest(t, "rpe", cluster.ControlPlaneEmbedded, false)
}

// rampTest brings a two-node multitenant cluster up with controlPlane and
// runs the ramp's cases: all of them in Kubernetes mode (HostSubnets made
// through the API), the fixed VNID of a project only with the registry.
func rampTest(t *testing.T, short, controlPlane string, all bool) {
	c := up(t, short, cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}, External: true},
		Mode:         "multitenant",
		ControlPlane: controlPlane,
	})
	var net *networkv1.Client
	if c.Kube != nil {
		var err error
		if net, err = networkv1.NewForConfig(c.Kube.Admin()); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.RefreshVNIDs(ctx(t)); err != nil {
		t.Fatal(err)
	}
	ext := c.Lab.External
	global1, alpha1, beta1 := c.Nodes[0].Pods[0], c.Nodes[0].Pods[1], c.Nodes[0].Pods[2]
	alpha2, beta2 := c.Nodes[1].Pods[1], c.Nodes[1].Pods[2]
	if global1.VNID != 0 || alpha1.VNID == 0 || beta1.VNID == 0 || alpha1.VNID == beta1.VNID || alpha2.VNID != alpha1.VNID {
		t.Fatalf("VNIDs: default %d, alpha %d/%d, beta %d", global1.VNID, alpha1.VNID, alpha2.VNID, beta1.VNID)
	}
	exec := func(ns string, argv ...string) {
		t.Helper()
		if out, err := c.Lab.Exec(ctx(t), ns, argv...); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
	pings := func(ns string, to netip.Addr) bool {
		_, err := c.Lab.Exec(ctx(t), ns, "ping", "-c", "1", "-W", "1", "-q", to.String())
		return err == nil
	}
	// Hosts are registered with gvsctl hosts: with the registry always, in
	// Kubernetes mode (gvsctl --kubeconfig) those named "*-ctl"; the other
	// HostSubnets are made through the API.
	viaGvsctl := func(name string) bool { return net == nil || strings.HasSuffix(name, "-ctl") }
	hostsCtl := func(args ...string) ([]byte, error) {
		if net == nil {
			return c.RegistryCtl(ctx(t), append([]string{"hosts"}, args...)...)
		}
		return c.KubeCtl(ctx(t), append([]string{"hosts"}, args...)...)
	}
	// register makes the ramp's HostSubnet (or registry record) and waits
	// for its subnet.
	register := func(name string, fixed string) netip.Prefix {
		t.Helper()
		if viaGvsctl(name) {
			args := []string{"add", name, ext.IP.String()}
			if fixed != "" {
				args = append(args, "--fixed-vnid", fixed)
			}
			out, err := hostsCtl(args...)
			if err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(string(out))
			if len(f) != 3 || f[0] != name || f[1] != ext.IP.String() {
				t.Fatalf("gvsctl hosts add printed %q; want NAME IP SUBNET", out)
			}
			sub, err := netip.ParsePrefix(f[2])
			if err != nil || !c.Spec.ClusterNetwork.Contains(sub.Addr()) {
				t.Fatalf("%s got subnet %q (%v), not in the cluster network %v", name, f[2], err, c.Spec.ClusterNetwork)
			}
			t.Logf("%s (fixed VNID %q) got subnet %v", name, fixed, sub)
			// gvsctl hosts list shows it: name, address, subnet, fixed VNID.
			list, err := hostsCtl("list")
			if want := strings.Join([]string{name, ext.IP.String(), sub.String(), cmp.Or(fixed, "-")}, " "); err != nil ||
				!slices.ContainsFunc(strings.Split(string(list), "\n"), func(l string) bool { return strings.Join(strings.Fields(l), " ") == want }) {
				t.Errorf("gvsctl hosts list lacks %q: %v\n%s", want, err, list)
			}
			return sub
		}
		a := map[string]string{networkv1.AssignSubnetAnnotation: "true"}
		if fixed != "" {
			a[networkv1.FixedVNIDHostAnnotation] = fixed
		}
		hs := &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: a}, Host: name, HostIP: ext.IP.String()}
		if _, err := net.HostSubnets().Create(ctx(t), hs); err != nil {
			t.Fatal(err)
		}
		var sub netip.Prefix
		testutil.WaitFor(t, 30*time.Second, name+"'s subnet from gvs-master", func() (bool, error) {
			hs, err := net.HostSubnets().Get(ctx(t), name)
			if err != nil || hs.Subnet == "" {
				return false, nil
			}
			sub, err = netip.ParsePrefix(hs.Subnet)
			return true, err
		})
		if !c.Spec.ClusterNetwork.Contains(sub.Addr()) {
			t.Fatalf("%s got subnet %v outside the cluster network %v", name, sub, c.Spec.ClusterNetwork)
		}
		t.Logf("%s (fixed VNID %q) got subnet %v", name, fixed, sub)
		return sub
	}
	// device makes the ramp's kernel VXLAN device "ramp0" on the external
	// host: VNI vni, from local, flooding to both nodes, with addr in the
	// ramp's subnet and the cluster network routed to it.
	device := func(vni uint32, local netip.Addr, addr netip.Prefix) {
		t.Helper()
		_, _ = c.Lab.Exec(ctx(t), ext.NS, "ip", "link", "del", "ramp0")
		exec(ext.NS, "ip", "link", "add", "ramp0", "type", "vxlan", "id", fmt.Sprint(vni), "dstport", "4789",
			"local", local.String(), "dev", "eth0", "nolearning")
		for _, n := range c.Nodes {
			exec(ext.NS, "bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "ramp0", "dst", n.IP.String())
		}
		exec(ext.NS, "ip", "addr", "add", addr.String(), "dev", "ramp0")
		exec(ext.NS, "ip", "link", "set", "ramp0", "up")
		exec(ext.NS, "ip", "route", "replace", c.Spec.ClusterNetwork.String(), "dev", "ramp0")
	}
	t.Cleanup(func() { _, _ = c.Lab.Exec(ctx(t), ext.NS, "ip", "link", "del", "ramp0") })
	rampAddr := func(sub netip.Prefix) netip.Prefix { return netip.PrefixFrom(sub.Addr().Next(), sub.Bits()) }
	reach := func(what string, from string, to netip.Addr) {
		t.Helper()
		if !testutil.Eventually(20*time.Second, func() bool { return pings(from, to) }) {
			t.Errorf("%s: %s does not reach %v", what, from, to)
		}
	}
	refused := func(what string, from string, to netip.Addr) {
		t.Helper()
		for range 2 { // two tries: the first may wait for ARP
			if pings(from, to) {
				t.Errorf("%s: %s reaches %v", what, from, to)
				return
			}
		}
	}
	// countFrom counts, from now on, the IP packets and ARP frames the
	// ramp's device receives from the given addresses (an nftables
	// counter on ramp0's ingress): a refused sender's packets must not
	// reach the ramp at all (not only go unanswered: a ping's reply would
	// be refused on its way back anyway). It counts by sender because the
	// device also receives what the test allows: the ARP replies of the
	// pods the ramp pinged, when its kernel re-checks their entries.
	countFrom := func(srcs ...netip.Addr) func() uint64 {
		t.Helper()
		set := make([]string, len(srcs))
		for i, a := range srcs {
			set[i] = a.String()
		}
		list := "{ " + strings.Join(set, ", ") + " }"
		_, _ = c.Lab.Exec(ctx(t), ext.NS, "nft", "delete", "table", "netdev", "rampcount")
		exec(ext.NS, "nft", "add", "table", "netdev", "rampcount")
		t.Cleanup(func() { _, _ = c.Lab.Exec(ctx(t), ext.NS, "nft", "delete", "table", "netdev", "rampcount") })
		exec(ext.NS, "nft", "add", "chain", "netdev", "rampcount", "in", `{ type filter hook ingress device "ramp0" priority 0; }`)
		exec(ext.NS, "nft", "add", "rule", "netdev", "rampcount", "in", "ip", "saddr", list, "counter")
		exec(ext.NS, "nft", "add", "rule", "netdev", "rampcount", "in", "arp", "saddr", "ip", list, "counter")
		return func() uint64 {
			t.Helper()
			out, err := c.Lab.Exec(ctx(t), ext.NS, "nft", "-j", "list", "table", "netdev", "rampcount")
			if err != nil {
				t.Fatalf("nft list table netdev rampcount: %v\n%s", err, out)
			}
			var doc struct {
				Nftables []struct {
					Rule *struct {
						Expr []struct {
							Counter *struct {
								Packets uint64 `json:"packets"`
							} `json:"counter"`
						} `json:"expr"`
					} `json:"rule"`
				} `json:"nftables"`
			}
			if err := json.Unmarshal(out, &doc); err != nil {
				t.Fatalf("nft -j list table netdev rampcount: %v\n%s", err, out)
			}
			var n, rules uint64
			for _, o := range doc.Nftables {
				if o.Rule == nil {
					continue
				}
				rules++
				for _, e := range o.Rule.Expr {
					if e.Counter != nil {
						n += e.Counter.Packets
					}
				}
			}
			if rules != 2 {
				t.Fatalf("nft table netdev rampcount has %d rules, want 2:\n%s", rules, out)
			}
			return n
		}
	}
	unregister := func(name string, sub netip.Prefix) {
		t.Helper()
		if viaGvsctl(name) {
			if out, err := hostsCtl("delete", name); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		} else if err := net.HostSubnets().Delete(ctx(t), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 20*time.Second, name+"'s rules gone from every node", func() (bool, error) {
			for i := range c.Nodes {
				if strings.Contains(ctl(t, c, i, "dump-flows", "table=90"), sub.String()) {
					return false, nil
				}
			}
			return true, nil
		})
	}

	t.Run("fixed VNID of a project", func(t *testing.T) {
		sub := register("f5-alpha", fmt.Sprint(alpha1.VNID))
		addr := rampAddr(sub)
		device(alpha1.VNID, ext.IP, addr)
		want := fmt.Sprintf("load:%#x->NXM_NX_TUN_ID[0..31]", alpha1.VNID)
		for i := range c.Nodes {
			testutil.WaitFor(t, 20*time.Second, "the ramp's rules on "+c.Nodes[i].Name, func() (bool, error) {
				out := ctl(t, c, i, "dump-flows", "table=90")
				return strings.Contains(out, sub.String()) && strings.Contains(out, want), nil
			})
		}
		if out := ctl(t, c, 1, "show"); !strings.Contains(out, fmt.Sprintf("subnet %s fixed VNID %d (not a node)", sub, alpha1.VNID)) {
			t.Errorf("gvsctl show on n2 does not show the ramp's fixed VNID:\n%s", out)
		}
		reach("alpha on n1 → ramp", alpha1.NS, addr.Addr())
		reach("alpha on n2 → ramp", alpha2.NS, addr.Addr())
		reach("global pod → ramp", global1.NS, addr.Addr())
		reach("ramp → alpha on n1", ext.NS, alpha1.IP)
		reach("ramp → alpha on n2", ext.NS, alpha2.IP)
		reach("ramp → global pod", ext.NS, global1.IP)
		fromBeta := countFrom(beta1.IP, beta2.IP)
		refused("beta on n1 → ramp", beta1.NS, addr.Addr())
		refused("beta on n2 → ramp", beta2.NS, addr.Addr())
		if n := fromBeta(); n != 0 {
			t.Errorf("the ramp received %d packets while beta's pods sent to it: the nodes must not send them", n)
		}
		// The counter's own check: it counts what an allowed pod sends.
		fromAlpha := countFrom(alpha1.IP)
		reach("alpha on n1 → ramp, counted", alpha1.NS, addr.Addr())
		if fromAlpha() == 0 {
			t.Errorf("the ramp's counter saw nothing of alpha's pings: it cannot tell whether beta's reached the ramp")
		}
		refused("ramp → beta on n1", ext.NS, beta1.IP)
		refused("ramp → beta on n2", ext.NS, beta2.IP)

		// The ramp speaking as beta (its device on beta's VNI): table 10
		// takes only the fixed VNID from it.
		device(beta1.VNID, ext.IP, addr)
		refused("ramp as beta → beta on n1", ext.NS, beta1.IP)
		refused("ramp as beta → alpha on n2", ext.NS, alpha2.IP)

		// Another underlay address, not the registered one: table 10
		// refuses it whatever its VNI.
		other := ext.IP.Next()
		exec(ext.NS, "ip", "addr", "add", netip.PrefixFrom(other, c.Lab.Underlay.Bits()).String(), "dev", "eth0")
		t.Cleanup(func() {
			_, _ = c.Lab.Exec(ctx(t), ext.NS, "ip", "addr", "del", netip.PrefixFrom(other, c.Lab.Underlay.Bits()).String(), "dev", "eth0")
		})
		device(alpha1.VNID, other, addr)
		refused("unregistered underlay host → alpha on n1", ext.NS, alpha1.IP)
		refused("unregistered underlay host → alpha on n2", ext.NS, alpha2.IP)
		device(alpha1.VNID, ext.IP, addr)
		reach("ramp back on its address → alpha on n2", ext.NS, alpha2.IP)

		unregister("f5-alpha", sub)
		refused("alpha → deleted ramp", alpha1.NS, addr.Addr())
	})

	if !all {
		return
	}
	t.Run("fixed VNID 0 is global", func(t *testing.T) {
		sub := register("f5-global-ctl", "0")
		addr := rampAddr(sub)
		device(0, ext.IP, addr)
		reach("beta on n2 → global ramp", beta2.NS, addr.Addr())
		reach("alpha on n1 → global ramp", alpha1.NS, addr.Addr())
		reach("global ramp → beta on n1", ext.NS, beta1.IP)
		reach("global ramp → alpha on n2", ext.NS, alpha2.IP)
		unregister("f5-global-ctl", sub)
	})

	t.Run("no fixed VNID: a node", func(t *testing.T) {
		sub := register("f5-node", "")
		addr := rampAddr(sub)
		device(alpha1.VNID, ext.IP, addr) // it speaks as alpha, as a node's alpha pod would
		reach("alpha on n2 → node-like ramp", alpha2.NS, addr.Addr())
		reach("node-like ramp → alpha on n1", ext.NS, alpha1.IP)
		refused("beta on n1 → node-like ramp (beta's VNI on the wire)", beta1.NS, addr.Addr())
		refused("node-like ramp as alpha → beta on n2", ext.NS, beta2.IP)
		unregister("f5-node", sub)
	})
}
