package kube

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/master"
)

// These tests run gvs-master's controller in this process against a real
// kube-apiserver in a lab namespace (internal/kubetest), authenticated as
// the gvs-master ServiceAccount of deploy/rbac.yaml, so its role is tested
// to be enough.

func testNetwork() Network {
	return Network{
		// H=6 in a /16: the rotation rule applies (10.1.0.0/26, 10.1.1.0/26, ...).
		ClusterNetworks: []master.ClusterNetwork{{CIDR: netip.MustParsePrefix("10.1.0.0/16"), HostSubnetLength: 6}},
		ServiceNetwork:  netip.MustParsePrefix("172.30.0.0/16"),
		Mode:            sdn.ModeMultitenant,
		GlobalProjects:  []string{"infra"},
	}
}

// env is an API server with the clients the tests use.
type env struct {
	t      *testing.T
	srv    *kubetest.Server
	admin  kubernetes.Interface
	net    *networkv1.Client
	master *rest.Config // the gvs-master ServiceAccount
	logs   *logLines    // what the masters started by startMaster logged
	// egressCheck is the EgressCheckInterval of the masters startMaster
	// starts (zero: the default).
	egressCheck time.Duration
}

// logLines keeps the lines a text logger writes, so that a test can wait
// for the master to have logged a decision that changes nothing it could
// watch (a refusal).
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(b))
	return len(b), nil
}

// count returns how many lines contain every one of parts.
func (l *logLines) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			n++
		}
	}
	return n
}

func newEnv(t *testing.T, short string) *env {
	s := kubetest.New(t, short)
	e := &env{t: t, srv: s, logs: new(logLines)}
	var err error
	if e.admin, err = kubernetes.NewForConfig(s.Admin()); err != nil {
		t.Fatal(err)
	}
	if e.net, err = networkv1.NewForConfig(s.Admin()); err != nil {
		t.Fatal(err)
	}
	if e.master, err = s.ServiceAccountConfig(e.ctx(), "gvs", "gvs-master"); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

// startMaster runs a replica; the returned stop cancels it and waits for
// Run to return (it releases the Lease).
func (e *env) startMaster(id string, n Network) (*Master, func()) {
	e.t.Helper()
	m, err := NewMaster(MasterConfig{Network: n, REST: e.master, Identity: id, EgressCheckInterval: e.egressCheck,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.MultiWriter(tWriter{e.t}, e.logs), &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", id)})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("master %s: %v", id, err)
			}
		case <-time.After(30 * time.Second):
			e.t.Errorf("master %s did not stop", id)
		}
	}
	e.t.Cleanup(stop)
	return m, stop
}

func (e *env) createNS(names ...string) {
	e.t.Helper()
	for _, n := range names {
		if _, err := e.admin.CoreV1().Namespaces().Create(e.ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// deleteNS deletes a Namespace and finalizes it, as the namespace
// controller (not running here: no kube-controller-manager) would once the
// namespace is empty.
func (e *env) deleteNS(name string) {
	e.t.Helper()
	ctx := e.ctx()
	if err := e.admin.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	ns, err := e.admin.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		e.t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := e.admin.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// netid returns a NetNamespace's netid, or -1 if it does not exist.
func (e *env) netid(name string) int64 {
	n, err := e.net.NetNamespaces().Get(e.ctx(), name)
	if err != nil {
		return -1
	}
	return int64(n.NetID)
}

func (e *env) netids() map[string]uint32 {
	l, err := e.net.NetNamespaces().List(e.ctx(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	m := map[string]uint32{}
	for _, n := range l.Items {
		m[n.Name] = n.NetID
	}
	return m
}

func (e *env) subnets() map[string]string {
	l, err := e.net.HostSubnets().List(e.ctx(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	m := map[string]string{}
	for _, h := range l.Items {
		m[h.Name] = h.Subnet
	}
	return m
}

// waitNetNamespaces waits until every Namespace has a NetNamespace.
func (e *env) waitNetNamespaces(d time.Duration, names ...string) {
	e.t.Helper()
	testutil.WaitFor(e.t, d, fmt.Sprintf("NetNamespaces for %v", names), func() (bool, error) {
		got := e.netids()
		for _, n := range names {
			if _, ok := got[n]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
}

// annotate writes the change-network annotation as `oc adm pod-network`
// does (get, set, update) and waits for the master to remove it.
func (e *env) annotate(name, value string, wantApplied bool) {
	e.t.Helper()
	ctx := e.ctx()
	n, err := e.net.NetNamespaces().Get(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[networkv1.ChangePodNetworkAnnotation] = value
	if _, err := e.net.NetNamespaces().Update(ctx, n); err != nil {
		e.t.Fatal(err)
	}
	if !wantApplied {
		return
	}
	testutil.WaitFor(e.t, 5*time.Second, name+": annotation "+value+" not applied", func() (bool, error) {
		n, err := e.net.NetNamespaces().Get(ctx, name)
		_, pending := n.Annotations[networkv1.ChangePodNetworkAnnotation]
		return err == nil && !pending, nil
	})
}

func (e *env) createNode(name string, ip string) types.UID {
	e.t.Helper()
	ctx := e.ctx()
	n, err := e.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if ip != "" {
		e.setNodeIP(n, ip)
	}
	return n.UID
}

func (e *env) setNodeIP(n *corev1.Node, ip string) {
	e.t.Helper()
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: n.Name}, {Type: corev1.NodeInternalIP, Address: ip}}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(e.ctx(), n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// expectedSubnets returns the first n subnets the allocator of network
// hands out, in order: what the etcd mode hands out too.
func expectedSubnets(t *testing.T, n Network, count int) []string {
	sa, err := master.NewSubnetAllocator(n.ClusterNetworks)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for range count {
		p, err := sa.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.String())
	}
	return out
}

// TestNetNamespaces: the ClusterNetwork is published from the
// configuration; default and the global projects get netid 0; a new
// Namespace gets a fresh netid of its own within a second; deleting it
// deletes its NetNamespace.
func TestNetNamespaces(t *testing.T) {
	e := newEnv(t, "nn")
	e.createNS("infra")
	m, _ := e.startMaster("m1", testNetwork())
	testutil.WaitFor(e.t, 10*time.Second, "master leading", func() (bool, error) { return m.Leading(), nil })
	e.waitNetNamespaces(10*time.Second, "default", "kube-system", "gvs", "infra")

	cn, err := e.net.ClusterNetworks().Get(e.ctx(), networkv1.ClusterNetworkDefault)
	if err != nil {
		t.Fatal(err)
	}
	if cn.Network != "10.1.0.0/16" || cn.HostSubnetLength != 6 || cn.ServiceNetwork != "172.30.0.0/16" ||
		cn.PluginName != "redhat/openshift-ovs-multitenant" || len(cn.ClusterNetworks) != 1 ||
		cn.ClusterNetworks[0] != (networkv1.ClusterNetworkEntry{CIDR: "10.1.0.0/16", HostSubnetLength: 6}) ||
		cn.VXLANPort == nil || *cn.VXLANPort != 4789 {
		t.Fatalf("ClusterNetwork default = %+v", cn)
	}
	got := e.netids()
	if got["default"] != 0 || got["infra"] != 0 {
		t.Fatalf("default and the global project must have netid 0: %v", got)
	}
	if got["kube-system"] < master.MinVNID {
		t.Fatalf("kube-system has netid %d, want a fresh one (>= %d)", got["kube-system"], master.MinVNID)
	}

	start := time.Now()
	e.createNS("alpha", "beta")
	e.waitNetNamespaces(time.Second, "alpha", "beta")
	t.Logf("NetNamespaces of 2 new namespaces after %v", time.Since(start))
	got = e.netids()
	used := map[uint32]string{}
	for name, id := range got {
		if id == 0 {
			if name != "default" && name != "infra" {
				t.Errorf("%s has netid 0 without being default or global", name)
			}
			continue
		}
		if other, dup := used[id]; dup {
			t.Errorf("%s and %s share netid %d without a join", name, other, id)
		}
		used[id] = name
	}
	for _, n := range []string{"alpha", "beta"} {
		if nn, err := e.net.NetNamespaces().Get(e.ctx(), n); err != nil || nn.NetName != n {
			t.Errorf("NetNamespace %s: netname %q, err %v", n, nn.NetName, err)
		}
	}

	e.deleteNS("beta")
	testutil.WaitFor(e.t, 5*time.Second, "beta's NetNamespace deleted", func() (bool, error) { return e.netid("beta") == -1, nil })
}

// TestChangeNetwork: the annotation oc adm pod-network writes changes
// netids as OpenShift's master does, and is removed; one that cannot be
// applied stays, and changes nothing.
func TestChangeNetwork(t *testing.T) {
	e := newEnv(t, "cn")
	e.createNS("alpha", "beta", "gamma", "delta")
	m, _ := e.startMaster("m1", testNetwork())
	testutil.WaitFor(e.t, 10*time.Second, "master leading", func() (bool, error) { return m.Leading(), nil })
	e.waitNetNamespaces(10*time.Second, "alpha", "beta", "gamma", "delta")
	alpha, beta := e.netid("alpha"), e.netid("beta")

	e.annotate("beta", "join:alpha", true)
	if got := e.netid("beta"); got != alpha {
		t.Fatalf("beta joined alpha: netid %d, want alpha's %d", got, alpha)
	}
	e.annotate("gamma", "global", true)
	if got := e.netid("gamma"); got != 0 {
		t.Fatalf("gamma made global: netid %d, want 0", got)
	}
	e.annotate("beta", "isolate", true)
	if got := e.netid("beta"); got == alpha || got == 0 || got == beta {
		// beta's first netid was released when it joined alpha, and the
		// allocator does not hand it out again at once.
		t.Fatalf("beta isolated: netid %d, want a fresh one (alpha %d, old %d)", got, alpha, beta)
	}
	if got := e.netid("alpha"); got != alpha {
		t.Fatalf("alpha's netid changed to %d (was %d) when beta left it", got, alpha)
	}
	e.annotate("gamma", "isolate", true)
	if got := e.netid("gamma"); got < int64(master.MinVNID) {
		t.Fatalf("gamma isolated from global: netid %d", got)
	}

	// Refusals: the annotation stays (oc adm pod-network then reports a
	// failure), the netid does not move.
	before := e.netids()
	for _, c := range []struct{ ns, value string }{
		{"alpha", "join:nosuch"},
		{"default", "isolate"},
		{"beta", "join:"},
		{"gamma", "global:alpha"},
	} {
		e.annotate(c.ns, c.value, false)
	}
	// A valid change after them, applied, proves the master has seen them
	// all: one watch delivers NetNamespace events in order, and one worker
	// takes them from a FIFO queue.
	e.annotate("delta", "global", true)
	for _, n := range []string{"alpha", "default", "beta", "gamma"} {
		nn, err := e.net.NetNamespaces().Get(e.ctx(), n)
		if err != nil {
			t.Fatal(err)
		}
		if nn.NetID != before[n] {
			t.Errorf("%s: refused change moved netid %d -> %d", n, before[n], nn.NetID)
		}
		if _, ok := nn.Annotations[networkv1.ChangePodNetworkAnnotation]; !ok {
			t.Errorf("%s: refused annotation was removed", n)
		}
	}
}

// TestHostSubnets: a Node with an InternalIP gets a HostSubnet with the
// subnets the etcd mode hands out (same allocator, rotation rule and
// cursor); deleting the Node deletes it and releases the subnet, which
// is not handed out again at once.
func TestHostSubnets(t *testing.T) {
	e := newEnv(t, "hs")
	n := testNetwork()
	want := expectedSubnets(t, n, 4)
	m, _ := e.startMaster("m1", n)
	testutil.WaitFor(e.t, 10*time.Second, "master leading", func() (bool, error) { return m.Leading(), nil })

	uid1 := e.createNode("node1", "192.168.50.1")
	testutil.WaitFor(e.t, 5*time.Second, "node1's HostSubnet", func() (bool, error) { return e.subnets()["node1"] != "", nil })
	hs, err := e.net.HostSubnets().Get(e.ctx(), "node1")
	if err != nil {
		t.Fatal(err)
	}
	if hs.Host != "node1" || hs.HostIP != "192.168.50.1" || hs.Subnet != want[0] || hs.Annotations[networkv1.NodeUIDAnnotation] != string(uid1) {
		t.Fatalf("HostSubnet node1 = host %q hostIP %q subnet %q uid %q; want node1 192.168.50.1 %s %s",
			hs.Host, hs.HostIP, hs.Subnet, hs.Annotations[networkv1.NodeUIDAnnotation], want[0], uid1)
	}

	// No InternalIP: no HostSubnet, until the address appears.
	e.createNode("node2", "")
	e.createNode("node3", "192.168.50.3")
	testutil.WaitFor(e.t, 5*time.Second, "node3's HostSubnet", func() (bool, error) { return e.subnets()["node3"] != "", nil })
	if s := e.subnets(); s["node2"] != "" || s["node3"] != want[1] {
		t.Fatalf("subnets %v: want node2 none (no address yet), node3 %s", s, want[1])
	}
	n2, err := e.admin.CoreV1().Nodes().Get(e.ctx(), "node2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.setNodeIP(n2, "192.168.50.2")
	testutil.WaitFor(e.t, 5*time.Second, "node2's HostSubnet", func() (bool, error) { return e.subnets()["node2"] == want[2], nil })

	// The hostIP follows the Node's address.
	n2, _ = e.admin.CoreV1().Nodes().Get(e.ctx(), "node2", metav1.GetOptions{})
	e.setNodeIP(n2, "192.168.50.22")
	testutil.WaitFor(e.t, 5*time.Second, "node2's hostIP updated", func() (bool, error) {
		hs, err := e.net.HostSubnets().Get(e.ctx(), "node2")
		return err == nil && hs.HostIP == "192.168.50.22" && hs.Subnet == want[2], nil
	})

	// Another node's address is refused (a node's kubelet may write its
	// Node's status): node2 keeps its hostIP while it claims node1's, and
	// a new node with node1's address gets no HostSubnet.
	n2, _ = e.admin.CoreV1().Nodes().Get(e.ctx(), "node2", metav1.GetOptions{})
	const refused = "another node's hostIP; refused"
	before2, before6 := e.logs.count(refused, "node=node2 "), e.logs.count(refused, "node=node6 ")
	e.setNodeIP(n2, "192.168.50.1")
	e.createNode("node6", "192.168.50.1")
	testutil.WaitFor(e.t, 10*time.Second, "the master to refuse node2's and node6's claims", func() (bool, error) {
		return e.logs.count(refused, "node=node2 ") > before2 && e.logs.count(refused, "node=node6 ") > before6, nil
	})
	if hs, err := e.net.HostSubnets().Get(e.ctx(), "node2"); err != nil || hs.HostIP != "192.168.50.22" {
		t.Fatalf("node2 claiming node1's address: HostSubnet %v, %v; want hostIP 192.168.50.22 kept", hs, err)
	}
	if s, ok := e.subnets()["node6"]; ok {
		t.Fatalf("node6 with node1's address got HostSubnet %s", s)
	}
	n2, _ = e.admin.CoreV1().Nodes().Get(e.ctx(), "node2", metav1.GetOptions{})
	e.setNodeIP(n2, "192.168.50.22")
	if err := e.admin.CoreV1().Nodes().Delete(e.ctx(), "node6", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := e.admin.CoreV1().Nodes().Delete(e.ctx(), "node1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(e.t, 5*time.Second, "node1's HostSubnet deleted", func() (bool, error) { _, ok := e.subnets()["node1"]; return !ok, nil })
	e.createNode("node4", "192.168.50.4")
	testutil.WaitFor(e.t, 5*time.Second, "node4's HostSubnet", func() (bool, error) { return e.subnets()["node4"] != "", nil })
	if got := e.subnets()["node4"]; got != want[3] {
		t.Fatalf("node4 got %s, want %s (the cursor moves on; node1's %s is not reused at once)", got, want[3], want[0])
	}

	// HostSubnets made by hand: one for a Node is adopted with its subnet
	// (the UID stamped), one without a Node (F5) is left alone.
	for name, subnet := range map[string]string{"node5": "10.1.40.0/26", "f5": "10.1.41.0/26"} {
		hs := &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: name}, Host: name, HostIP: "192.168.50.99", Subnet: subnet}
		if _, err := e.net.HostSubnets().Create(e.ctx(), hs); err != nil {
			t.Fatal(err)
		}
	}
	uid5 := e.createNode("node5", "192.168.50.5")
	testutil.WaitFor(e.t, 5*time.Second, "node5's HostSubnet adopted", func() (bool, error) {
		hs, err := e.net.HostSubnets().Get(e.ctx(), "node5")
		return err == nil && hs.Annotations[networkv1.NodeUIDAnnotation] == string(uid5) && hs.HostIP == "192.168.50.5", nil
	})
	if hs, err := e.net.HostSubnets().Get(e.ctx(), "node5"); err != nil || hs.Subnet != "10.1.40.0/26" {
		t.Fatalf("adopted HostSubnet: %v, %v; want subnet 10.1.40.0/26", hs, err)
	}
	if hs, err := e.net.HostSubnets().Get(e.ctx(), "f5"); err != nil || hs.Subnet != "10.1.41.0/26" || hs.Annotations[networkv1.NodeUIDAnnotation] != "" {
		t.Fatalf("F5 HostSubnet changed: %v, %v", hs, err)
	}
}

// TestRestartAndLeaderChange: two replicas; one leads. What it allocated
// survives its stop: the other takes over, keeps every netid and subnet,
// and allocates new ones without collisions, going on from the saved
// cursors. Namespaces and Nodes created and deleted while no master runs
// are caught up with by the next one.
func TestRestartAndLeaderChange(t *testing.T) {
	e := newEnv(t, "lc")
	n := testNetwork()
	want := expectedSubnets(t, n, 4)
	e.createNS("alpha", "beta")
	m1, stop1 := e.startMaster("m1", n)
	testutil.WaitFor(e.t, 10*time.Second, "m1 leading", func() (bool, error) { return m1.Leading(), nil })
	m2, stop2 := e.startMaster("m2", n)
	e.createNode("node1", "192.168.50.1")
	e.createNode("node2", "192.168.50.2")
	e.waitNetNamespaces(10*time.Second, "alpha", "beta")
	testutil.WaitFor(e.t, 5*time.Second, "HostSubnets", func() (bool, error) { return len(e.subnets()) == 2, nil })
	e.annotate("beta", "join:alpha", true)
	if m2.Leading() {
		t.Fatal("two leaders")
	}
	ids, subs := e.netids(), e.subnets()

	stop1() // releases the Lease
	testutil.WaitFor(e.t, 10*time.Second, "m2 leading after m1 stopped", func() (bool, error) { return m2.Leading(), nil })
	e.createNS("gamma")
	e.createNode("node3", "192.168.50.3")
	e.waitNetNamespaces(5*time.Second, "gamma")
	testutil.WaitFor(e.t, 5*time.Second, "node3's HostSubnet", func() (bool, error) { return e.subnets()["node3"] != "", nil })
	got := e.netids()
	for name, id := range ids {
		if got[name] != id {
			t.Errorf("after the leader change %s has netid %d, had %d", name, got[name], id)
		}
	}
	for name, id := range got {
		if _, old := ids[name]; !old && slices.Contains(slices.Collect(maps.Values(ids)), id) && id != 0 {
			t.Errorf("new namespace %s got netid %d, already in use", name, id)
		}
	}
	if s := e.subnets(); s["node1"] != subs["node1"] || s["node2"] != subs["node2"] || s["node3"] != want[2] {
		t.Errorf("subnets after the leader change %v, want node1 %s node2 %s node3 %s", s, subs["node1"], subs["node2"], want[2])
	}

	// No master at all: changes pile up in the API server.
	stop2()
	e.createNS("late1", "late2")
	e.deleteNS("gamma")
	if err := e.admin.CoreV1().Nodes().Delete(e.ctx(), "node2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	m3, _ := e.startMaster("m3", n)
	testutil.WaitFor(e.t, 10*time.Second, "m3 leading", func() (bool, error) { return m3.Leading(), nil })
	e.waitNetNamespaces(5*time.Second, "late1", "late2")
	testutil.WaitFor(e.t, 5*time.Second, "gamma's NetNamespace and node2's HostSubnet deleted", func() (bool, error) {
		_, g := e.netids()["gamma"]
		_, n2 := e.subnets()["node2"]
		return !g && !n2, nil
	})
	got = e.netids()
	if got["alpha"] != ids["alpha"] || got["beta"] != ids["alpha"] {
		t.Errorf("after the restart alpha %d beta %d, want both %d", got["alpha"], got["beta"], ids["alpha"])
	}
	if got["late1"] == got["late2"] || got["late1"] < master.MinVNID || got["late2"] < master.MinVNID {
		t.Errorf("late1 %d late2 %d: want two fresh netids", got["late1"], got["late2"])
	}
	e.createNode("node4", "192.168.50.4")
	testutil.WaitFor(e.t, 5*time.Second, "node4's HostSubnet", func() (bool, error) { return e.subnets()["node4"] != "", nil })
	if s := e.subnets()["node4"]; s != want[3] {
		t.Errorf("node4 after the restart got %s, want %s (the saved cursor)", s, want[3])
	}
}

// TestAPIServerOutage: the API server stops under a running master and
// comes back (nothing can change meanwhile: it is the only way in). The
// master keeps its allocations, re-establishes its watches (and, if it
// lost the Lease, leads again) and serves what is created afterwards.
func TestAPIServerOutage(t *testing.T) {
	e := newEnv(t, "out")
	m, _ := e.startMaster("m1", testNetwork())
	testutil.WaitFor(e.t, 10*time.Second, "master leading", func() (bool, error) { return m.Leading(), nil })
	e.createNS("alpha")
	e.waitNetNamespaces(5*time.Second, "alpha")
	alpha := e.netid("alpha")
	if err := e.srv.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.StartAPIServer(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.createNS("beta")
	e.createNode("node1", "192.168.50.1")
	// The master may have lost the Lease meanwhile; it campaigns again.
	testutil.WaitFor(e.t, 30*time.Second, "beta's NetNamespace and node1's HostSubnet after the outage", func() (bool, error) {
		return e.netid("beta") >= int64(master.MinVNID) && e.subnets()["node1"] != "", nil
	})
	if got := e.netid("alpha"); got != alpha {
		t.Fatalf("alpha's netid changed across the outage: %d -> %d", alpha, got)
	}
}

// TestNodeRBAC: with the gvs-node ServiceAccount's token (what gvs-switchd
// runs with) the network objects can be read but not changed: the API
// server refuses (403) to update, create or delete a NetNamespace or a
// HostSubnet, and to change the ClusterNetwork.
func TestNodeRBAC(t *testing.T) {
	e := newEnv(t, "rb")
	e.createNS("alpha")
	m, _ := e.startMaster("m1", testNetwork())
	testutil.WaitFor(e.t, 10*time.Second, "master leading", func() (bool, error) { return m.Leading(), nil })
	e.createNode("node1", "192.168.50.1")
	e.waitNetNamespaces(10*time.Second, "alpha")
	testutil.WaitFor(e.t, 5*time.Second, "node1's HostSubnet", func() (bool, error) { return e.subnets()["node1"] != "", nil })

	cfg, err := e.srv.ServiceAccountConfig(e.ctx(), "gvs", "gvs-node")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := networkv1.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := e.ctx()
	// Reading works (the node's job).
	nn, err := nc.NetNamespaces().Get(ctx, "alpha")
	if err != nil {
		t.Fatalf("gvs-node reading a NetNamespace: %v", err)
	}
	hs, err := nc.HostSubnets().Get(ctx, "node1")
	if err != nil {
		t.Fatalf("gvs-node reading a HostSubnet: %v", err)
	}
	if _, err := nc.ClusterNetworks().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("gvs-node listing ClusterNetworks: %v", err)
	}
	// Changing is refused.
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("gvs-node %s: %v, want 403 Forbidden", what, err)
		}
	}
	nn.NetID = 0
	_, err = nc.NetNamespaces().Update(ctx, nn)
	forbidden("making alpha global", err)
	nn2 := nn.DeepCopy()
	nn2.Annotations = map[string]string{networkv1.ChangePodNetworkAnnotation: "global"}
	_, err = nc.NetNamespaces().Update(ctx, nn2)
	forbidden("annotating alpha global", err)
	_, err = nc.NetNamespaces().Create(ctx, &networkv1.NetNamespace{ObjectMeta: metav1.ObjectMeta{Name: "evil"}, NetName: "evil"})
	forbidden("creating a NetNamespace", err)
	forbidden("deleting a NetNamespace", nc.NetNamespaces().Delete(ctx, "alpha", metav1.DeleteOptions{}))
	hs.Subnet = "10.1.63.0/26"
	_, err = nc.HostSubnets().Update(ctx, hs)
	forbidden("moving a HostSubnet", err)
	_, err = nc.HostSubnets().Create(ctx, &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: "evil"}, Host: "evil", HostIP: "192.168.50.9", Subnet: "10.1.62.0/26"})
	forbidden("creating a HostSubnet", err)
	forbidden("deleting a HostSubnet", nc.HostSubnets().Delete(ctx, "node1", metav1.DeleteOptions{}))
	cn, err := nc.ClusterNetworks().Get(ctx, networkv1.ClusterNetworkDefault)
	if err != nil {
		t.Fatal(err)
	}
	cn.PluginName = "redhat/openshift-ovs-subnet"
	_, err = nc.ClusterNetworks().Update(ctx, cn)
	forbidden("changing the ClusterNetwork", err)
	// Nothing moved.
	if got := e.netid("alpha"); got < int64(master.MinVNID) {
		t.Errorf("alpha's netid is %d after the refused changes", got)
	}
}
