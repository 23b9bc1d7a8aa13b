package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
)

// TestRealNodesDNS runs the cluster DNS (CoreDNS, kubetest.StartDNS) on
// real nodes with gvs in deploy/'s mode (multitenant): pods resolve
// Service names and reach a Service by name across nodes; a pod of
// another, isolated project still resolves names (the DNS server is in
// kube-system, a global project) but cannot reach the other project's
// Service; a name outside cluster.local is not answered (nothing is
// forwarded out of the lab). Then the quick cases of upstream's DNS suite.
func TestRealNodesDNS(t *testing.T) {
	c := startRealCluster(t, "dn", "multitenant")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := c.StartDNS(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster DNS ready in %v", time.Since(start).Round(time.Millisecond))
	t.Run("names", func(t *testing.T) { realNodeDNSNames(t, c) })
	t.Run("upstream-dns", func(t *testing.T) {
		runUpstream(t, c, upstreamDNSQuick, "Feature:|Provider:|Serial|Slow")
	})
}

// upstreamDNSQuick are the DNS suite's cases make test runs; the full
// focus is `\[sig-network\] DNS` (docs/kubernetes.md has its results).
const upstreamDNSQuick = `\[sig-network\] DNS should provide DNS for (the cluster|services) \[Conformance\]`

func realNodeDNSNames(t *testing.T, c *kubetest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kc := c.Client
	n1, n2 := c.Nodes[0].Name, c.Nodes[1].Name
	for _, ns := range []string{"dnsa", "dnsb"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type podAt struct{ ns, name, node string }
	server, client, other := podAt{"dnsa", "server", n2}, podAt{"dnsa", "client", n1}, podAt{"dnsb", "other", n1}
	for _, p := range []podAt{server, client, other} {
		pod := agnhostPod(p.name, p.node, false, map[string]string{"app": p.name})
		if _, err := kc.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := kc.CoreV1().Services("dnsa").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "dnsa"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "server"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	api, err := kc.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []podAt{server, client, other} {
		waitRealPod(t, ctx, c, p.ns, p.name)
	}

	exec := func(p podAt, argv ...string) (string, error) {
		out, err := c.Kubectl(ctx, append([]string{"exec", "-n", p.ns, p.name, "--"}, argv...)...)
		return strings.TrimSpace(string(out)), err
	}
	// The kubelet wrote the pod's resolv.conf from its clusterDNS.
	if out, err := exec(client, "cat", "/etc/resolv.conf"); err != nil || !strings.Contains(out, "nameserver "+kubetest.DNSServiceIP.String()) ||
		!strings.Contains(out, "search dnsa.svc.cluster.local svc.cluster.local cluster.local") {
		t.Errorf("client's resolv.conf: %v\n%s", err, out)
	}
	// lookup resolves name (a fully qualified name: busybox's nslookup
	// does not search) from p until the answer has want: a Service's
	// rules and records appear within seconds.
	lookup := func(p podAt, name, want string) error {
		return testutil.Poll(20*time.Second, fmt.Sprintf("nslookup %s from %s/%s to say %s", name, p.ns, p.name, want), func() (bool, error) {
			out, err := exec(p, "nslookup", name)
			return err == nil && strings.Contains(out, want), fmt.Errorf("%v\n%s", err, out)
		})
	}
	// connect asks agnhost (Go's resolver: search path and ndots from
	// resolv.conf) in p to resolve addr's name and open a TCP connection.
	connect := func(p podAt, addr string) error {
		out, err := exec(p, "/agnhost", "connect", "--timeout=3s", addr)
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	for _, tc := range []struct {
		from       podAt
		name, want string
	}{
		{client, "kubernetes.default.svc.cluster.local", api.Spec.ClusterIP},
		{client, "web.dnsa.svc.cluster.local", svc.Spec.ClusterIP},
		{other, "kubernetes.default.svc.cluster.local", api.Spec.ClusterIP},
		// DNS is infrastructure: an isolated project resolves another's
		// names, as in OpenShift (the names are not secret; the
		// addresses stay unreachable, below).
		{other, "web.dnsa.svc.cluster.local", svc.Spec.ClusterIP},
	} {
		if err := lookup(tc.from, tc.name, tc.want); err != nil {
			t.Error(err)
		}
	}
	// By name, across nodes (client on the first node, server on the
	// second), with the short name through the search path.
	// kube-proxy programs the Service within seconds.
	if err := testutil.Poll(20*time.Second, "client → web:80 by name", func() (bool, error) {
		err := connect(client, "web:80")
		return err == nil, err
	}); err != nil {
		t.Error(err)
	}
	if err := connect(client, "web.dnsa.svc.cluster.local:80"); err != nil {
		t.Errorf("client → web.dnsa.svc.cluster.local:80: %v", err)
	}
	// Another project resolves the name but is refused the Service: the
	// connection times out (dropped by gvs), it does not fail to resolve.
	if err := connect(other, "web.dnsa:80"); err == nil || !strings.Contains(err.Error(), "TIMEOUT") {
		t.Errorf("other (project dnsb) → dnsa's Service web.dnsa:80: %v, want a TIMEOUT (name resolved, traffic dropped)", err)
	}
	// Nothing outside cluster.local is answered: the lab's DNS forwards
	// no query out of the lab.
	if out, err := exec(client, "nslookup", "example.com"); err == nil {
		t.Errorf("example.com resolved from a pod (the lab's DNS must not forward):\n%s", out)
	}
}
