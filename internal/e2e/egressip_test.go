package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/demo/netns"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// TestEgressIPRegistry: egress IPs set with gvsctl egress-ip in the etcd
// registry (egressIPCase).
func TestEgressIPRegistry(t *testing.T) {
	c := up(t, "eipr", egressIPSpec(cluster.ControlPlaneEmbedded))
	set := func(kind, name string, ips ...string) {
		t.Helper()
		if out, err := c.RegistryCtl(ctx(t), append([]string{"egress-ip", kind, name}, ips...)...); err != nil {
			t.Fatalf("gvsctl egress-ip %s %s %v: %v\n%s", kind, name, ips, err, out)
		}
	}
	list := func() string {
		out, err := c.RegistryCtl(ctx(t), "egress-ip")
		if err != nil {
			t.Errorf("gvsctl egress-ip: %v\n%s", err, out)
		}
		return string(out)
	}
	egressIPCase(t, c, set, list)
	egressIPSurvives(t, c, set, list, false)
}

// egressIPSurvives: a live upgrade of the hosting node's daemon keeps its
// egress IP serving (address and tables are handed over; only with
// upgrade: the daemons must serve CNI to hand over); a plain stop
// removes the address; in the etcd registry (!upgrade), once the node's
// lease expires the other node drops the project's outbound traffic (fail
// closed) and gvsctl shows the egress IP's node gone.
func egressIPSurvives(t *testing.T, c *cluster.Cluster, set func(kind, name string, ips ...string), list func() string, upgrade bool) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	alpha1, alpha2, beta2 := n1.Pods[1], n2.Pods[1], n2.Pods[2]
	under := netip.PrefixFrom(n1.IP, 24).Masked().Addr().As4()
	under[3] = 150
	eip := netip.AddrFrom4(under)
	expect, _ := egressIPServer(t, c)
	set("project", "alpha", eip.String())
	set("node", n1.Name, eip.String())
	expect("before the upgrade", map[*cluster.Pod]netip.Addr{&alpha1: eip, &alpha2: eip})
	if upgrade {
		if err := c.UpgradeDaemon(ctx(t), 0); err != nil {
			t.Fatal(err)
		}
		if !nodeHolds(t, c, 0, eip) {
			t.Errorf("node 1 lost %v in the live upgrade", eip)
		}
		expect("after a live upgrade", map[*cluster.Pod]netip.Addr{&alpha1: eip, &alpha2: eip})
	}
	if err := c.StopDaemon(0); err != nil {
		t.Fatal(err)
	}
	if nodeHolds(t, c, 0, eip) {
		t.Errorf("node 1 still holds %v after its daemon stopped", eip)
	}
	if upgrade {
		return // Kubernetes: the HostSubnet stays; nothing tells node 2 (see docs/kubernetes.md)
	}
	if !testutil.Eventually(30*time.Second, func() bool { return strings.Contains(list(), "node-gone") }) {
		t.Errorf("gvsctl egress-ip does not show node 1 gone:\n%s", list())
	}
	var flows []byte
	if !testutil.Eventually(20*time.Second, func() bool {
		flows, _ = c.Ctl(ctx(t), 1, "dump-flows", "table=101")
		return strings.Contains(string(flows), fmt.Sprintf("reg0=%d, actions=drop", alpha2.VNID))
	}) {
		t.Errorf("node 2 does not drop alpha's outbound traffic with its egress IP's node gone:\n%s", flows)
	}
	expect("the hosting node gone", map[*cluster.Pod]netip.Addr{&alpha2: {}, &beta2: n2.IP})
}

// TestEgressIPKube: the same with the NetNamespaces' and HostSubnets'
// egressIPs in the API server.
func TestEgressIPKube(t *testing.T) {
	kubetest.Require(t)
	c := up(t, "eipk", egressIPSpec(cluster.ControlPlaneKube))
	net, err := networkv1.NewForConfig(c.Kube.Admin())
	if err != nil {
		t.Fatal(err)
	}
	set := func(kind, name string, ips ...string) {
		t.Helper()
		err := testutil.Poll(10*time.Second, "the update", func() (bool, error) { // an update may race gvs-master's
			if kind == "project" {
				nn, err := net.NetNamespaces().Get(ctx(t), name)
				if err != nil {
					return false, nil
				}
				nn.EgressIPs = ips
				_, err = net.NetNamespaces().Update(ctx(t), nn)
				return err == nil, nil
			}
			hs, err := net.HostSubnets().Get(ctx(t), name)
			if err != nil {
				return false, nil
			}
			hs.EgressIPs = ips
			_, err = net.HostSubnets().Update(ctx(t), hs)
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("egress IPs of %s %s: %v", kind, name, err)
		}
	}
	list := func() string {
		nns, err := net.NetNamespaces().List(ctx(t), metav1.ListOptions{})
		if err != nil {
			t.Error(err)
			return ""
		}
		var b strings.Builder
		for _, nn := range nns.Items {
			fmt.Fprintf(&b, "%s %v\n", nn.NetName, nn.EgressIPs)
		}
		return b.String()
	}
	egressIPCase(t, c, set, list)
	egressIPSurvives(t, c, set, list, true)
}

// egressIPSpec is the lab of the egress IP tests: two nodes, per node p1
// default, p2 alpha, p3 beta, multitenant, and the external host.
func egressIPSpec(cp string) cluster.Spec {
	return cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}, External: true},
		Mode:         "multitenant",
		ControlPlane: cp,
		CNI:          cp == cluster.ControlPlaneKube,
	}
}

// egressIPCase is the egress IP walk both control planes take, on a lab of
// egressIPSpec. set sets a project's or a node's egress IPs ("project" or
// "node", a name, the IPs: none removes them); list returns what the
// control plane shows. The external host runs a TCP server that reports
// each client's source address to it and logs every connection.
//
//  1. No egress IPs: each pod leaves from its node's address.
//  2. alpha names an egress IP no node hosts: alpha's outbound traffic is
//     dropped, never seen with a node's address; beta unaffected.
//  3. Node 1 hosts it: alpha's pods on both nodes leave from it, beta's
//     from their nodes; node 1's underlay holds it; a server on node 1 is
//     not reached through it; isolation unchanged.
//  4. beta's pods address their frames to alpha's egress MAC (a static
//     neighbour entry for their gateway): still their nodes' addresses.
//  5. A second egress IP on node 2: the first still serves; node 1 stops
//     hosting the first: the second serves, node 1 drops the address.
//  6. alpha's egress IPs removed: back to the nodes' addresses.
func egressIPCase(t *testing.T, c *cluster.Cluster, set func(kind, name string, ips ...string), list func() string) {
	if err := c.RefreshVNIDs(ctx(t)); err != nil {
		t.Fatal(err)
	}
	n1, n2 := c.Nodes[0], c.Nodes[1]
	alpha1, beta1, alpha2, beta2 := n1.Pods[1], n1.Pods[2], n2.Pods[1], n2.Pods[2]
	under := netip.PrefixFrom(n1.IP, 24).Masked().Addr().As4()
	under[3] = 150
	eip1 := netip.AddrFrom4(under)
	under[3] = 151
	eip2 := netip.AddrFrom4(under)

	expect, srvLog := egressIPServer(t, c)
	none := netip.Addr{}
	holds := func(i int, ip netip.Addr) bool { return nodeHolds(t, c, i, ip) }
	logLines := func() []string {
		b, _ := os.ReadFile(srvLog)
		return strings.Split(string(b), "\n")
	}

	expect("no egress IP", map[*cluster.Pod]netip.Addr{&alpha1: n1.IP, &alpha2: n2.IP, &beta1: n1.IP})

	set("project", "alpha", eip1.String())
	before := len(logLines())
	expect("egress IP hosted by nobody", map[*cluster.Pod]netip.Addr{&alpha1: none, &alpha2: none})
	// Fail closed: not one connection from alpha's pods reached the host
	// (under a node's address or any other) while it was dropped.
	if got := logLines()[before-1:]; strings.Contains(strings.Join(got, "\n"), "tcp client") {
		t.Errorf("the external host saw connections while alpha's egress was to be dropped:\n%s", strings.Join(got, "\n"))
	}
	expect("egress IP hosted by nobody: beta unaffected", map[*cluster.Pod]netip.Addr{&beta1: n1.IP, &beta2: n2.IP})

	set("node", n1.Name, eip1.String())
	expect("node 1 hosts it", map[*cluster.Pod]netip.Addr{&alpha1: eip1, &alpha2: eip1, &beta1: n1.IP, &beta2: n2.IP})
	if !holds(0, eip1) || holds(1, eip1) {
		t.Errorf("egress IP %v: node 1 holds it %v, node 2 %v; want only node 1", eip1, holds(0, eip1), holds(1, eip1))
	}
	if got := list(); !strings.Contains(got, eip1.String()) {
		t.Errorf("the control plane does not show %v:\n%s", eip1, got)
	}
	// The egress IP is no way into node 1: a server there answers on the
	// node's address, not on the egress IP.
	bench := filepath.Join(binDir, "gvs-bench")
	nsrv, err := c.Lab.Start(ctx(t), n1.NS, filepath.Join(t.TempDir(), "n1-tcp.log"), bench, "tcp-server", "-l", ":5202")
	if err != nil {
		t.Fatal(err)
	}
	dial := func(to netip.Addr) bool {
		cctx, cancel := context.WithTimeout(ctx(t), 3*time.Second)
		defer cancel()
		_, err := c.Lab.Exec(cctx, c.Lab.External.NS, bench, "tcp-client", "-c", to.String()+":5202", "-bytes", "1000")
		return err == nil
	}
	if !testutil.Eventually(10*time.Second, func() bool { return dial(n1.IP) }) {
		t.Errorf("the external host does not reach a server on node 1's address")
	} else if dial(eip1) {
		t.Errorf("the external host reaches node 1's server through the egress IP %v", eip1)
	}
	nsrv.Stop()
	iso := c.Reachability(ctx(t))
	if bad := iso.Mismatches(); len(bad) > 0 {
		t.Errorf("isolation with an egress IP: %v", bad)
	}

	// beta's pods try alpha's egress MAC; the switch rewrites it.
	mac := sdn.EgressMAC(alpha1.VNID)
	for _, b := range []cluster.Pod{beta1, beta2} {
		node := n1
		if b.NS == beta2.NS {
			node = n2
		}
		gw := node.Subnet.Masked().Addr().Next()
		if out, err := c.Lab.Exec(ctx(t), b.NS, "ip", "neigh", "replace", gw.String(), "lladdr", sdn.FormatMAC(mac), "dev", "eth0", "nud", "permanent"); err != nil {
			t.Fatalf("forge the gateway's MAC in %s: %v\n%s", b.Name, err, out)
		}
	}
	expect("beta addresses alpha's egress MAC", map[*cluster.Pod]netip.Addr{&beta1: n1.IP, &beta2: n2.IP, &alpha2: eip1})
	for _, b := range []cluster.Pod{beta1, beta2} {
		_, _ = c.Lab.Exec(ctx(t), b.NS, "ip", "neigh", "flush", "dev", "eth0")
	}

	set("project", "alpha", eip1.String(), eip2.String())
	set("node", n2.Name, eip2.String())
	expect("two egress IPs: the first serves", map[*cluster.Pod]netip.Addr{&alpha1: eip1, &alpha2: eip1})
	set("node", n1.Name)
	expect("node 1 lets go: the second serves", map[*cluster.Pod]netip.Addr{&alpha1: eip2, &alpha2: eip2, &beta1: n1.IP})
	if holds(0, eip1) || !holds(1, eip2) {
		t.Errorf("after the move: node 1 holds %v: %v, node 2 holds %v: %v", eip1, holds(0, eip1), eip2, holds(1, eip2))
	}

	set("project", "alpha")
	expect("egress IPs removed", map[*cluster.Pod]netip.Addr{&alpha1: n1.IP, &alpha2: n2.IP})
	if t.Failed() {
		for i := range c.Nodes {
			out, _ := c.Ctl(ctx(t), i, "dump-flows", "table=101")
			t.Logf("--- %s table 101 ---\n%s", c.Nodes[i].Name, out)
		}
		t.Logf("--- egress IPs ---\n%s", list())
	}
}

// egressIPServer runs a TCP server on the lab's external host that tells
// each client the source address it sees and logs every connection
// (srvLog). expect checks, within 20 s each, the address the host sees
// from each pod (the invalid address: the connection fails).
func egressIPServer(t *testing.T, c *cluster.Cluster) (expect func(step string, want map[*cluster.Pod]netip.Addr), srvLog string) {
	t.Helper()
	ext := c.Lab.External
	bench := filepath.Join(binDir, "gvs-bench")
	srvLog = filepath.Join(t.TempDir(), "ext-tcp.log")
	p, err := c.Lab.Start(ctx(t), ext.NS, srvLog, bench, "tcp-server", "-l", ":5201")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	// seenAs: the source address the external host saw (invalid: the
	// connection failed).
	seenAs := func(from cluster.Pod) netip.Addr {
		cctx, cancel := context.WithTimeout(ctx(t), 4*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, from.NS, bench, "tcp-client", "-c", ext.IP.String()+":5201", "-bytes", "20000")
		if err != nil {
			return netip.Addr{}
		}
		r, err := netns.ParseTransfer(out)
		if err != nil || !r.Intact {
			return netip.Addr{}
		}
		ap, err := netip.ParseAddrPort(r.SeenAs)
		if err != nil {
			return netip.Addr{}
		}
		return ap.Addr()
	}
	expect = func(step string, want map[*cluster.Pod]netip.Addr) {
		t.Helper()
		for p, w := range want {
			var got netip.Addr
			if !testutil.Eventually(20*time.Second, func() bool { got = seenAs(*p); return got == w }) {
				t.Errorf("%s: %s (%s) seen by the external host as %v, want %v", step, p.Name, p.Project, got, w)
			}
		}
	}
	return expect, srvLog
}

// TestEgressIPNetworkPolicy: in networkpolicy mode (etcd registry),
// NetworkPolicy and connection tracking apply to egress IP traffic as to
// NAT egress: with an egress IP on node 1, alpha's pods on both nodes
// leave from it; an ingress deny-all in alpha still lets the replies of
// its own connections back (tracked); an egress deny-all stops them; with
// it deleted they leave from the egress IP again.
func TestEgressIPNetworkPolicy(t *testing.T) {
	spec := egressIPSpec(cluster.ControlPlaneEmbedded)
	spec.Mode = "networkpolicy"
	c := up(t, "eipn", spec)
	if err := c.RefreshVNIDs(ctx(t)); err != nil {
		t.Fatal(err)
	}
	n1, n2 := c.Nodes[0], c.Nodes[1]
	alpha1, alpha2, beta2 := n1.Pods[1], n2.Pods[1], n2.Pods[2]
	under := netip.PrefixFrom(n1.IP, 24).Masked().Addr().As4()
	under[3] = 150
	eip := netip.AddrFrom4(under)
	expect, _ := egressIPServer(t, c)
	ctl := func(args ...string) {
		t.Helper()
		if out, err := c.RegistryCtl(ctx(t), args...); err != nil {
			t.Fatalf("gvsctl %v: %v\n%s", args, err, out)
		}
	}
	apply := func(yaml string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "np.yaml")
		if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		ctl("policy", "apply", "-f", f)
	}
	ctl("egress-ip", "project", "alpha", eip.String())
	ctl("egress-ip", "node", n1.Name, eip.String())
	expect("egress IP on node 1", map[*cluster.Pod]netip.Addr{&alpha1: eip, &alpha2: eip, &beta2: n2.IP})

	apply(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-in, namespace: alpha}
spec: {podSelector: {}, policyTypes: [Ingress]}
`)
	expect("alpha denies all ingress: its own connections' replies pass", map[*cluster.Pod]netip.Addr{&alpha1: eip, &alpha2: eip})

	apply(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-out, namespace: alpha}
spec: {podSelector: {}, policyTypes: [Egress]}
`)
	expect("alpha denies all egress", map[*cluster.Pod]netip.Addr{&alpha1: {}, &alpha2: {}, &beta2: n2.IP})

	ctl("policy", "delete", "-n", "alpha", "deny-out")
	expect("egress allowed again", map[*cluster.Pod]netip.Addr{&alpha1: eip, &alpha2: eip})
	if t.Failed() {
		for i := range c.Nodes {
			out, _ := c.Ctl(ctx(t), i, "dump-flows", "table=101")
			t.Logf("--- %s table 101 ---\n%s", c.Nodes[i].Name, out)
		}
	}
}

// nodeHolds reports whether node i's underlay link holds ip.
func nodeHolds(t *testing.T, c *cluster.Cluster, i int, ip netip.Addr) bool {
	t.Helper()
	out, err := c.Lab.Exec(ctx(t), c.Nodes[i].NS, "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	if err != nil {
		t.Errorf("ip addr in %s: %v\n%s", c.Nodes[i].Name, err, out)
	}
	return strings.Contains(string(out), " "+ip.String()+"/")
}

// TestEgressIPAuto: automatic assignment in the etcd registry (OpenShift's
// egressCIDRs): with both nodes' egress CIDRs covering the underlay,
// gvs-master assigns alpha's egress IP to one of them and alpha's pods on
// both nodes leave from it; when that node's daemon stops, its lease
// expires, gvs-master moves the egress IP to the other node and alpha's
// traffic resumes from the same address.
func TestEgressIPAuto(t *testing.T) {
	c := up(t, "eipa", egressIPSpec(cluster.ControlPlaneEmbedded))
	if err := c.RefreshVNIDs(ctx(t)); err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) string {
		t.Helper()
		out, err := c.RegistryCtl(ctx(t), args...)
		if err != nil {
			t.Fatalf("gvsctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	n1, n2 := c.Nodes[0], c.Nodes[1]
	pods := []cluster.Pod{n1.Pods[1], n2.Pods[1]} // alpha on each node
	under := netip.PrefixFrom(n1.IP, 24).Masked()
	eip := netip.AddrFrom4([4]byte{under.Addr().As4()[0], under.Addr().As4()[1], under.Addr().As4()[2], 160})
	expect, _ := egressIPServer(t, c)
	ctl("egress-ip", "cidrs", n1.Name, under.String())
	ctl("egress-ip", "cidrs", n2.Name, under.String())
	ctl("egress-ip", "project", "alpha", eip.String())
	expect("assigned automatically", map[*cluster.Pod]netip.Addr{&pods[0]: eip, &pods[1]: eip})
	host := -1
	if !testutil.Eventually(10*time.Second, func() bool {
		for i := range c.Nodes {
			if nodeHolds(t, c, i, eip) {
				host = i
			}
		}
		return host >= 0
	}) {
		t.Fatalf("no node holds %v:\n%s", eip, ctl("egress-ip"))
	}
	if out := ctl("egress-ip"); !strings.Contains(out, c.Nodes[host].Name) || !strings.Contains(out, "serving") {
		t.Errorf("gvsctl egress-ip does not show %v serving on %s:\n%s", eip, c.Nodes[host].Name, out)
	}
	other := 1 - host
	start := time.Now()
	if err := c.StopDaemon(host); err != nil {
		t.Fatal(err)
	}
	expect("the hosting node stopped: moved to the other node", map[*cluster.Pod]netip.Addr{&pods[other]: eip})
	t.Logf("traffic resumed %v after the hosting node's daemon stopped (node lease %ds)", time.Since(start).Round(time.Second), 5)
	if !nodeHolds(t, c, other, eip) {
		t.Errorf("%s does not hold %v after the move:\n%s", c.Nodes[other].Name, eip, ctl("egress-ip"))
	}
	// The new node announced it (gratuitous ARP): the external host's
	// entry names the new node's MAC.
	link, _ := c.Lab.Exec(ctx(t), c.Nodes[other].NS, "cat", "/sys/class/net/eth0/address")
	neigh, _ := c.Lab.Exec(ctx(t), c.Lab.External.NS, "ip", "neigh", "show", eip.String())
	if mac := strings.TrimSpace(string(link)); mac == "" || !strings.Contains(string(neigh), mac) {
		t.Errorf("the external host's neighbour entry for %v is %q, want the new node's MAC %s", eip, neigh, mac)
	}
}
