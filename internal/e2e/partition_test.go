package e2e

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// registryNodes returns node → subnet from `gvsctl nodes`.
func registryNodes(t *testing.T, c *cluster.Cluster) (map[string]string, string) {
	t.Helper()
	out, err := c.RegistryCtl(ctx(t), "nodes")
	if err != nil {
		return nil, string(out)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		if f := strings.Fields(line); len(f) == 3 {
			m[f[0]] = f[2]
		}
	}
	return m, string(out)
}

// etcdCut drops node i's TCP to the registry's client port in its own
// namespace (the VXLAN underlay keeps working) until the returned func runs.
func etcdCut(t *testing.T, c *cluster.Cluster, i int) (heal func()) {
	t.Helper()
	u := c.EtcdEndpoints[0]
	port := u[strings.LastIndex(u, ":")+1:]
	rule := []string{"OUTPUT", "-p", "tcp", "--dport", port, "-j", "DROP"}
	if out, err := c.Lab.Exec(ctx(t), c.Nodes[i].NS, append([]string{"iptables", "-I"}, rule...)...); err != nil {
		t.Fatalf("cutting %s off etcd: %v\n%s", c.Nodes[i].Name, err, out)
	}
	healed := false
	heal = func() {
		if healed {
			return
		}
		healed = true
		if out, err := c.Lab.Exec(ctx(t), c.Nodes[i].NS, append([]string{"iptables", "-D"}, rule...)...); err != nil {
			t.Errorf("healing %s: %v\n%s", c.Nodes[i].Name, err, out)
		}
	}
	t.Cleanup(heal)
	return heal
}

// cniAdd attaches a fresh pod namespace on node i and returns its address.
func cniAdd(t *testing.T, c *cluster.Cluster, i int, name string) (string, netip.Addr) {
	t.Helper()
	ns := podNS(t, c, name)
	list, err := c.CNIConfList(i, "1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	var ip netip.Addr
	err = c.InNode(i, func() error {
		res, err := c.CNI().AddNetworkList(ctx(t), list, cluster.RuntimeConf("ctr-"+name, ns, "eth0", "default", name))
		if err != nil {
			return err
		}
		r, err := types100.GetResult(res)
		if err != nil {
			return err
		}
		ip, _ = netip.AddrFromSlice(r.IPs[0].Address.IP.To4())
		return nil
	})
	if err != nil {
		t.Fatalf("CNI ADD %s on %s: %v", name, c.Nodes[i].Name, err)
	}
	return ns, ip
}

// TestPartitionSubnetReassigned: node n3 is cut off from etcd past its
// lease; gvs-master releases its subnet and a node that registers meanwhile
// (n4, restarted with nothing) receives it. When the partition heals, n3
// must not take it back: it withdraws it, gets a fresh subnet, reconfigures
// tun0 and its rules, its old pods fail CNI CHECK naming the reason, a new
// pod gets an address of the new subnet, and every node learns it.
func TestPartitionSubnetReassigned(t *testing.T) {
	// 10.128.0.0/21 with 9 host bits: exactly four /23s, so the allocator's
	// cursor wraps and the freed subnets are handed out again.
	c := up(t, "cpp", cluster.Spec{
		Lab:            lab.Spec{Nodes: 4, PodsPerNode: 1, Projects: []string{"default"}},
		Mode:           "subnet",
		ClusterNetwork: netip.MustParsePrefix("10.128.0.0/21"),
		ControlPlane:   cluster.ControlPlaneEmbedded,
		NodeLeaseTTL:   5, // 3 s lost leases of healthy nodes on a loaded machine (a flake seen in CI)
		CNI:            true,
	})
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := c.Lab.Exec(ctx(t), c.Nodes[0].NS, "cat", filepath.Join(c.Lab.StateDir(), "master.log")); err == nil {
				t.Logf("--- master.log ---\n%s", b)
			}
		}
	})
	n1, n2, n3, n4 := c.Nodes[0], c.Nodes[1], c.Nodes[2], c.Nodes[3]
	old3 := n3.Subnet
	if got, out := registryNodes(t, c); got[n3.Name] != "10.128.4.0/23" || got[n4.Name] != "10.128.6.0/23" {
		t.Fatalf("initial subnets:\n%s", out)
	}
	// n4 goes away: its subnet is freed.
	if err := c.StopNode(3); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(15*time.Second, func() bool { got, _ := registryNodes(t, c); _, ok := got[n4.Name]; return got != nil && !ok }) {
		t.Fatal("n4 still registered past its lease")
	}

	// n3 is cut off from etcd past its lease.
	heal := etcdCut(t, c, 2)
	if !testutil.Eventually(20*time.Second, func() bool { got, _ := registryNodes(t, c); _, ok := got[n3.Name]; return got != nil && !ok }) {
		t.Fatal("n3 still registered while cut off past its lease")
	}
	// Meanwhile n3 forwards on its last-known state.
	if s := showJSON(t, c, 2); s.Subnet != old3.String() || s.Pods != 1 {
		t.Errorf("n3 while cut off: %+v", s)
	}
	// n4 comes back as a new machine would, without the subnet it
	// remembers: it registers anew (its old leases go stale) and receives
	// n3's freed subnet, the first free one after the cursor's wrap.
	if err := os.Remove(filepath.Join(c.CNIStateDir(3), "node-subnet")); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartDaemon(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	got, out := registryNodes(t, c)
	if got[n4.Name] != old3.String() {
		t.Fatalf("n4 did not receive n3's freed subnet %v:\n%s", old3, out)
	}

	heal()
	var s3 control.ShowResult
	if !testutil.Eventually(30*time.Second, func() bool {
		s3 = showJSON(t, c, 2)
		return s3.Subnet != old3.String() && s3.Subnet != "(none)" && s3.Subnet != ""
	}) {
		t.Fatalf("n3 did not move to a fresh subnet: %+v", s3)
	}
	new3 := netip.MustParsePrefix(s3.Subnet)
	if s3.SubnetChanges != 1 || s3.PreviousSubnet != old3.String() || s3.Pods != 0 {
		t.Errorf("n3 show after the change: %+v", s3)
	}
	// The registry: every node once, no subnet twice, n3 on its new subnet.
	got, out = registryNodes(t, c)
	seen := map[string]string{}
	for n, s := range got {
		if o, dup := seen[s]; dup {
			t.Errorf("subnet %s held by %s and %s", s, o, n)
		}
		seen[s] = n
	}
	if len(got) != 4 || got[n3.Name] != new3.String() || got[n4.Name] != old3.String() {
		t.Errorf("registry after the partition:\n%s", out)
	}
	// tun0 holds the new gateway only; no rule of n3 names its old subnet.
	tun, _ := c.Lab.Exec(ctx(t), n3.NS, "ip", "-4", "-br", "addr", "show", "tun0")
	if gw := new3.Addr().Next().String() + "/23"; !strings.Contains(string(tun), gw) || strings.Contains(string(tun), old3.Addr().Next().String()+"/") {
		t.Errorf("n3 tun0: %s, want only %s", tun, gw)
	}
	// Only the tunnel rules towards n4, its new owner, name it.
	oldText := strings.TrimSuffix(old3.Addr().String(), ".0") + "."
	for _, line := range strings.Split(ctl(t, c, 2, "dump-flows"), "\n") {
		if strings.Contains(line, oldText) && !strings.Contains(line, n4.IP.String()+"->tun_dst") {
			t.Errorf("n3 still has a rule for its old subnet %v: %s", old3, line)
		}
	}
	// The old pod's interface is gone and CNI CHECK names why.
	old := n3.Pods[0]
	if out, err := c.Lab.Exec(ctx(t), old.NS, "ip", "link", "show", "eth0"); err == nil {
		t.Errorf("n3's old pod still has eth0:\n%s", out)
	}
	list, err := c.CNIConfList(2, "1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	err = c.InNode(2, func() error {
		return c.CNI().CheckNetworkList(ctx(t), list, cluster.RuntimeConf(cluster.ContainerID(old), old.NSPath, "eth0", old.Project, old.Name))
	})
	if err == nil || !strings.Contains(err.Error(), "no longer owns") || !strings.Contains(err.Error(), old3.String()) {
		t.Errorf("CNI CHECK of n3's old pod: %v, want a stale-address error naming %v", err, old3)
	} else {
		t.Logf("CNI CHECK of n3's old pod: %v", err)
	}
	// Every other node learns n3's new subnet and n4's.
	for _, i := range []int{0, 1, 3} {
		want := []string{n3.Name + "=" + new3.String()}
		if i != 3 {
			want = append(want, n4.Name+"="+old3.String())
		}
		if !testutil.Eventually(10*time.Second, func() bool {
			r := strings.Join(remotes(t, c, i), " ")
			for _, w := range want {
				if !strings.Contains(r, w) {
					return false
				}
			}
			return true
		}) {
			t.Errorf("%s remotes %v, want %v", c.Nodes[i].Name, remotes(t, c, i), want)
		}
	}
	// New pods: on n3 from its new subnet, on n4 from n3's old one (very
	// likely the very address n3's old pod had); they and n1's pod reach
	// each other, and n3's host reaches the n4 pod (n3 forwards the old
	// subnet to its new owner).
	ns3, ip3 := cniAdd(t, c, 2, "new3")
	ns4, ip4 := cniAdd(t, c, 3, "new4")
	if !new3.Contains(ip3) || !old3.Contains(ip4) {
		t.Fatalf("new pods: n3 %v (want in %v), n4 %v (want in %v)", ip3, new3, ip4, old3)
	}
	t.Logf("new pods: n3 %v, n4 %v (n3's old pod had %v)", ip3, ip4, old.IP)
	pingNS := func(ns string, to netip.Addr) {
		t.Helper()
		if out, err := nsExec(t, ns, "ping", "-c", "2", "-i", "0.2", "-W", "2", to.String()); err != nil {
			t.Errorf("%s → %v: %v\n%s", filepath.Base(ns), to, err, out)
		}
	}
	p1 := n1.Pods[0]
	pingNS(ns3, p1.IP)
	pingNS(ns4, p1.IP)
	pingNS(ns3, ip4)
	pingNS(ns4, ip3)
	pingNS(p1.NSPath, ip3)
	pingNS(p1.NSPath, ip4)
	pingNS(n2.Pods[0].NSPath, ip3)
	if ok, out := ping(t, c.Lab, n3.NS, ip4, 56); !ok {
		t.Errorf("n3's host does not reach n4's pod %v on n3's old subnet:\n%s", ip4, out)
	}
	logAgent(t, c, 2)

	// n3's gvs-switchd stops past its lease and restarts: nobody took its
	// subnet, so it asks for it back (remembered in its state directory),
	// gets it, and re-attaches its pod with the same address.
	if err := c.StopNode(2); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(15*time.Second, func() bool { got, _ := registryNodes(t, c); _, ok := got[n3.Name]; return got != nil && !ok }) {
		t.Fatal("n3 still registered past its lease")
	}
	if err := c.RestartDaemon(ctx(t), 2); err != nil {
		t.Fatal(err)
	}
	if s := showJSON(t, c, 2); s.Subnet != new3.String() || s.Pods != 1 {
		t.Errorf("n3 after a restart past its lease: %+v, want subnet %v and its pod", s, new3)
	}
	if !testutil.Eventually(10*time.Second, func() bool {
		_, err := nsExec(t, p1.NSPath, "ping", "-c", "1", "-W", "1", ip3.String())
		return err == nil
	}) {
		t.Errorf("n3's pod %v not reachable after n3's restart", ip3)
	}
}

// logAgent logs node i's control-plane lines, with their times.
func logAgent(t *testing.T, c *cluster.Cluster, i int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Lab.StateDir(), c.Nodes[i].Name+".log"))
	if err != nil {
		t.Log(err)
		return
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, k := range []string{"lease lost", "registry unreachable", "reachable again", "holds this node's subnet",
			"withdrawing", "NODE SUBNET", "subnet assigned", "registered again", "fresh subnet", "pod detached"} {
			if strings.Contains(l, k) {
				lines = append(lines, l)
				break
			}
		}
	}
	t.Logf("%s control-plane log:\n%s", c.Nodes[i].Name, strings.Join(lines, "\n"))
}

// showJSON runs `gvsctl -o json show` on node i.
func showJSON(t *testing.T, c *cluster.Cluster, i int) control.ShowResult {
	t.Helper()
	var s control.ShowResult
	out, err := c.Ctl(ctx(t), i, "-o", "json", "show")
	if err == nil {
		_ = json.Unmarshal(out, &s)
	}
	return s
}
