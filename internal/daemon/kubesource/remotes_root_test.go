package kubesource_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/daemon/kubesource"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// TestWaitForRemotes: once WaitForRemotes returns true, the sink has been
// told every other node, project VNID and Service there was when Follow
// started (a daemon taking over from a running one waits for it before it
// forwards; without it, it forwarded for tens of milliseconds without the
// other nodes' tunnel rules). Asserted at once, without polling.
func TestWaitForRemotes(t *testing.T) {
	srv := kubetest.New(t, "kw")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	port := uint32(4789)
	nc, kc := startClusterNetwork(t, ctx, srv, "redhat/openshift-ovs-multitenant", &port)
	for i, n := range []string{"n1", "n2", "n3"} {
		hs := &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: n}, Host: n,
			HostIP: []string{"192.168.61.1", "192.168.61.2", "192.168.61.3"}[i],
			Subnet: []string{"10.128.0.0/23", "10.128.2.0/23", "10.128.4.0/23"}[i]}
		if _, err := nc.HostSubnets().Create(ctx, hs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.NetNamespaces().Create(ctx, &networkv1.NetNamespace{
		ObjectMeta: metav1.ObjectMeta{Name: "beta"}, NetName: "beta", NetID: 21}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "beta"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Services("beta").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "beta"},
		Spec:       corev1.ServiceSpec{ClusterIP: "172.30.0.20", Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 5432}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := srv.ServiceAccountConfig(ctx, "gvs", "gvs-node")
	if err != nil {
		t.Fatal(err)
	}
	f := kubesource.New(kubesource.Config{REST: cfg, Node: "n1"})
	if _, err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var _ source.RemoteWaiter = f
	r := &recorder{}
	f.Follow(ctx, r)
	if !f.WaitForRemotes(ctx) {
		t.Fatalf("WaitForRemotes: %v", ctx.Err())
	}
	got := r.snapshot() // at once: what the waiter promised is there
	for _, want := range []string{
		"remote n2 192.168.61.2 10.128.2.0/23",
		"remote n3 192.168.61.3 10.128.4.0/23",
		"vnid beta 21",
		"service beta/db 172.30.0.20 [{6 5432}]",
	} {
		if !r.has(want) {
			t.Errorf("not told %q when WaitForRemotes returned; told:\n%v", want, got)
		}
	}

	// A context that ends first: false.
	f2 := kubesource.New(kubesource.Config{REST: cfg, Node: "n1"})
	if _, err := f2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	f2.Follow(ctx, &recorder{})
	done, stop := context.WithCancel(ctx)
	stop()
	if f2.WaitForRemotes(done) {
		t.Error("WaitForRemotes with an ended context: true, want false")
	}
}
