package kubesource_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/daemon/kubesource"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// recorder is a node as the follower drives it: what it was told, in
// order, as text.
type recorder struct {
	source.Discard // what it does not record
	mu             sync.Mutex
	events         []string
}

func (r *recorder) add(format string, args ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
	return nil
}

func (r *recorder) AddRemote(n sdn.RemoteNode) error {
	return r.add("remote %s %v %v", n.Name, n.IP, n.Subnet)
}
func (r *recorder) RemoveRemote(ip netip.Addr) error { return r.add("remove %v", ip) }
func (r *recorder) SetProjectVNID(p string, v uint32) error {
	return r.add("vnid %s %d", p, v)
}
func (r *recorder) ChangeSubnet(p netip.Prefix) error { return r.add("subnet %v", p) }
func (r *recorder) SetService(s sdn.Service) error {
	return r.add("service %s/%s %v %v", s.Namespace, s.Name, s.ClusterIP, s.Ports)
}
func (r *recorder) DeleteService(ns, name string) error {
	return r.add("delete service %s/%s", ns, name)
}

func (r *recorder) has(e string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.events, e)
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func waitFor(t *testing.T, r *recorder, e string) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("to be told %q", e), func() (bool, error) {
		return r.has(e), fmt.Errorf("told:\n%v", r.snapshot())
	})
}

// TestFollower runs the follower with gvs-switchd's ServiceAccount
// (deploy/rbac.yaml's gvs-node: read only) against a real API server:
// it waits for the ClusterNetwork and its own HostSubnet, then mirrors
// remote nodes, project VNIDs, its own subnet's change and Services; it
// keeps what it has while the API server is stopped, and what changed
// while it was down arrives when it is back.
func TestFollower(t *testing.T) {
	srv := kubetest.New(t, "ks")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	port := uint32(4789)
	nc, kc := startClusterNetwork(t, ctx, srv, "redhat/openshift-ovs-multitenant", &port)
	hostSubnet := func(name, ip, subnet string) *networkv1.HostSubnet {
		return &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: name}, Host: name, HostIP: ip, Subnet: subnet}
	}
	netns := func(name string, id uint32) *networkv1.NetNamespace {
		return &networkv1.NetNamespace{ObjectMeta: metav1.ObjectMeta{Name: name}, NetName: name, NetID: id}
	}
	if _, err := nc.NetNamespaces().Create(ctx, netns("alpha", 10)); err != nil {
		t.Fatal(err)
	}
	cfg, err := srv.ServiceAccountConfig(ctx, "gvs", "gvs-node")
	if err != nil {
		t.Fatal(err)
	}
	// Start waits for this node's HostSubnet.
	type started struct {
		f   *kubesource.Follower
		b   source.Bootstrap
		err error
	}
	done := make(chan started, 1)
	go func() {
		f := kubesource.New(kubesource.Config{REST: cfg, Node: "n1"})
		b, err := f.Start(ctx)
		done <- started{f, b, err}
	}()
	time.Sleep(time.Second) // Start must find no HostSubnet first and wait for it; no hook says it is waiting
	if _, err := nc.HostSubnets().Create(ctx, hostSubnet("n1", "192.168.60.1", "10.128.0.0/23")); err != nil {
		t.Fatal(err)
	}
	st := <-done
	if st.err != nil {
		t.Fatal(st.err)
	}
	b := st.b
	if b.Subnet != netip.MustParsePrefix("10.128.0.0/23") || b.NodeIP != netip.MustParseAddr("192.168.60.1") ||
		b.Projects["alpha"] != 10 || b.Cluster.Mode != sdn.ModeMultitenant || b.Cluster.ServiceNetwork.String() != "172.30.0.0/16" {
		t.Errorf("bootstrap: %+v", b)
	}
	f := st.f
	defer f.Close()
	r := &recorder{}
	f.Follow(ctx, r)

	if _, err := nc.HostSubnets().Create(ctx, hostSubnet("n2", "192.168.60.2", "10.128.2.0/23")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, "remote n2 192.168.60.2 10.128.2.0/23")
	waitFor(t, r, "vnid alpha 10")
	nn, err := nc.NetNamespaces().Get(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	nn.NetID = 12
	if _, err := nc.NetNamespaces().Update(ctx, nn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, "vnid alpha 12")
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Services("alpha").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "alpha"},
		Spec: corev1.ServiceSpec{ClusterIP: "172.30.0.10", Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 9}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, "service alpha/web 172.30.0.10 [{6 80} {132 9}]")
	// This node moves (gvs-master gave it another subnet).
	hs, err := nc.HostSubnets().Get(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	hs.Subnet = "10.128.4.0/23"
	if _, err := nc.HostSubnets().Update(ctx, hs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, "subnet 10.128.4.0/23")

	// The API server goes away: nothing is taken from the node.
	before := len(r.snapshot())
	if err := srv.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // a while without the API server, in which nothing may be told
	if got := r.snapshot(); len(got) != before {
		t.Errorf("told %v while the API server was down", got[before:])
	}
	if err := srv.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	nn, err = nc.NetNamespaces().Get(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	nn.NetID = 13
	if _, err := nc.NetNamespaces().Update(ctx, nn); err != nil {
		t.Fatal(err)
	}
	if err := nc.HostSubnets().Delete(ctx, "n2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, "vnid alpha 13")
	waitFor(t, r, "remove 192.168.60.2")
	if err := kc.CoreV1().Services("alpha").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, "delete service alpha/web")
}

// TestStartRefused: without read access (a ServiceAccount with no role)
// Start fails at once with the API server's refusal instead of waiting.
func TestStartRefused(t *testing.T) {
	srv := kubetest.New(t, "kr")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := srv.ServiceAccountConfig(ctx, "default", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubesource.New(kubesource.Config{REST: cfg, Node: "n1"}).Start(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("Start with no role: %v (ctx %v), want a refusal", err, ctx.Err())
	}
}
