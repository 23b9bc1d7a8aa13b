package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// realNodeUnderlay is the real-node lab's underlay: away from the cluster
// network (10.128.0.0/14) and the service network (172.30.0.0/16).
var realNodeUnderlay = netip.MustParsePrefix("192.168.244.0/24")

// startRealCluster makes a two-node lab whose nodes are Kubernetes nodes
// (containerd, kubelet, kube-proxy) with the control plane in the first,
// installs gvs with `kubectl apply -k deploy/` and waits until every node
// is Ready. Everything is removed when the test ends.
func startRealCluster(t *testing.T, short, mode string) *kubetest.Cluster {
	t.Helper()
	return startRealClusterN(t, short, mode, 2)
}

// startRealClusterN is startRealCluster with n nodes.
func startRealClusterN(t *testing.T, short, mode string, n int) *kubetest.Cluster {
	t.Helper()
	needRoot(t)
	if m := kubetest.MissingForNodes(kubetest.BinDir()); len(m) > 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("missing (make kube-tools image kube-images): %v", m)
		}
		t.Skipf("missing (make kube-tools image kube-images): %v", m)
	}
	prefix := fmt.Sprintf("gvr%s%d", short, os.Getpid()%100000)
	_ = kubetest.DestroyCluster(prefix) // left over from a crashed run with this pid
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l, err := lab.Create(ctx, lab.Spec{Prefix: prefix, Nodes: n, Underlay: realNodeUnderlay, External: true})
	if err != nil {
		t.Fatal(err)
	}
	var c *kubetest.Cluster
	t.Cleanup(func() {
		if os.Getenv("GVS_KEEP_LAB") != "" {
			t.Logf("GVS_KEEP_LAB: lab %s left running (kubetest.DestroyCluster removes it)", prefix)
			return
		}
		if t.Failed() && c != nil {
			for _, nd := range c.Nodes {
				for _, f := range []string{"kubelet", "containerd"} {
					t.Logf("--- %s %s log (end)\n%s", nd.Name, f, logTail(nd.Dir+"/"+f+".log", 40))
				}
			}
		}
		if c != nil {
			if err := c.Stop(); err != nil {
				t.Errorf("stopping the cluster: %v", err)
			}
		}
		if err := l.Destroy(); err != nil {
			t.Errorf("destroying the lab: %v", err)
		}
		if err := kubetest.DestroyCluster(prefix); err != nil {
			t.Errorf("removing the nodes: %v", err)
		}
	})
	c, err = kubetest.StartCluster(ctx, kubetest.ClusterOptions{Lab: l})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.InstallGVS(ctx, mode); err != nil {
		t.Fatal(err)
	}
	t.Logf("gvs installed, every node Ready, in %v", time.Since(start).Round(time.Millisecond))
	return c
}

func logTail(file string, n int) string {
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// agnhostPod is a pod running upstream's agnhost netexec (HTTP on 8080,
// UDP on 8081) on node.
func agnhostPod(name, node string, hostNetwork bool, labels map[string]string) *corev1.Pod {
	args := []string{"netexec", "--http-port=8080", "--udp-port=8081"}
	if hostNetwork {
		args = []string{"netexec", "--http-port=18080", "--udp-port=18081"}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:      node,
			HostNetwork:   hostNetwork,
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{
				Name: "agnhost", Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1", ImagePullPolicy: corev1.PullNever,
				Args: args,
			}},
		},
	}
}

// TestRealNodes runs gvs as a cluster administrator installs it: kubelets
// and containerd on every node, gvs-master and gvs-switchd started by the
// runtime from gvs's image, pods whose network the kubelet asks gvs-cni
// for. Pods reach each other on one node and across nodes, host-network
// pods reach pods and are reached by them, and a Service works through
// kube-proxy; in multitenant mode another project's pod is refused.
func TestRealNodes(t *testing.T) {
	c := startRealCluster(t, "rn", "multitenant")
	t.Run("pods", func(t *testing.T) { realNodePods(t, c) })
	// Upstream's judge, on the same cluster: the Networking Granular
	// Checks for pods (intra-pod and node-pod, HTTP and UDP; SCTP is
	// behind upstream's feature gate). make e2e-upstream runs the full
	// focuses.
	t.Run("upstream-granular", func(t *testing.T) {
		runUpstream(t, c, "Networking Granular Checks: Pods", "Feature:SCTPConnectivity")
	})
}

// TestRealNodesNetworkPolicy installs gvs in networkpolicy mode on real
// nodes and runs the first cases of upstream's NetworkPolicy suite
// (make e2e-upstream runs all of it).
func TestRealNodesNetworkPolicy(t *testing.T) {
	c := startRealCluster(t, "np", "networkpolicy")
	runUpstream(t, c, upstreamNetpolQuick, "Feature:SCTPConnectivity")
}

// upstreamNetpolQuick are the NetworkPolicy suite's cases make test runs.
const upstreamNetpolQuick = `Netpol NetworkPolicy between server and client should (support a 'default-deny-ingress' policy|support a 'default-deny-all' policy|enforce policy to allow traffic from pods within server namespace based on PodSelector|enforce policy based on Ports)`

// runUpstream runs upstream's e2e.test (make e2e-test) against the
// cluster with a ginkgo focus and skip, in the API server's namespace,
// and fails unless every focused spec passed.
func runUpstream(t *testing.T, c *kubetest.Cluster, focus, skip string) {
	bin := filepath.Join(kubetest.RepoRoot(), "bin", "e2e.test")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing (make e2e-test)", bin)
		}
		t.Skipf("%s missing (make e2e-test)", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out, err := c.Lab.Exec(ctx, c.Server.NS, bin, "--kubeconfig", c.Server.Kubeconfig,
		"--kubectl-path", filepath.Join(kubetest.BinDir(), kubetest.KubectlBinary),
		"--num-nodes", fmt.Sprint(len(c.Nodes)), "--provider", "skeleton",
		"--ginkgo.focus", focus, "--ginkgo.skip", skip, "--ginkgo.no-color", "--ginkgo.timeout", "14m",
		"--report-dir", t.TempDir(), "--dump-logs-on-failure=false")
	summary := regexp.MustCompile(`(?m)^(Ran \d+ of \d+ Specs.*|SUCCESS!.*|FAIL!.*)$`).FindAllString(string(out), -1)
	t.Logf("e2e.test --ginkgo.focus %q: %s", focus, strings.Join(summary, "; "))
	if err != nil {
		t.Fatalf("e2e.test: %v\n%s", err, logTail2(string(out), 150))
	}
	if m := regexp.MustCompile(`Ran (\d+) of`).FindStringSubmatch(string(out)); m == nil || m[1] == "0" {
		t.Fatalf("e2e.test ran no spec for focus %q", focus)
	}
}

func logTail2(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func realNodePods(t *testing.T, c *kubetest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kc := c.Client
	n1, n2 := c.Nodes[0].Name, c.Nodes[1].Name

	// Every Node got a HostSubnet from gvs-master (started by containerd).
	net, err := networkv1.NewForConfig(c.Server.Admin())
	if err != nil {
		t.Fatal(err)
	}
	subnets := map[string]netip.Prefix{}
	for _, nd := range c.Nodes {
		hs, err := net.HostSubnets().Get(ctx, nd.Name)
		if err != nil {
			t.Fatalf("HostSubnet %s: %v", nd.Name, err)
		}
		subnets[nd.Name] = netip.MustParsePrefix(hs.Subnet)
	}

	for _, ns := range []string{"alpha", "beta"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type podAt struct{ ns, name, node string }
	pods := []podAt{{"alpha", "a1", n1}, {"alpha", "a2", n1}, {"alpha", "a3", n2}, {"beta", "b1", n2}, {"default", "host1", n1}, {"default", "host2", n2}}
	for _, p := range pods {
		pod := agnhostPod(p.name, p.node, strings.HasPrefix(p.name, "host"), map[string]string{"app": "web-" + p.ns})
		if _, err := kc.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ips := map[string]netip.Addr{}
	for _, p := range pods {
		ips[p.name] = netip.MustParseAddr(waitRealPod(t, ctx, c, p.ns, p.name).Status.PodIP)
	}
	for _, p := range pods {
		if strings.HasPrefix(p.name, "host") {
			continue
		}
		if !subnets[p.node].Contains(ips[p.name]) {
			t.Errorf("pod %s on %s has %s, outside the node's HostSubnet %s", p.name, p.node, ips[p.name], subnets[p.node])
		}
	}
	t.Logf("pods: %v", ips)

	// connect asks agnhost in pod from to open a TCP connection to addr.
	connect := func(from podAt, addr string) error {
		out, err := c.Kubectl(ctx, "exec", "-n", from.ns, from.name, "--", "/agnhost", "connect", "--timeout=3s", addr)
		if err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	hp := func(name string, port int) string { return netip.AddrPortFrom(ips[name], uint16(port)).String() }
	for _, tc := range []struct {
		from podAt
		to   string
		want bool
	}{
		{pods[0], hp("a2", 8080), true},     // same node, same project
		{pods[0], hp("a3", 8080), true},     // across nodes
		{pods[2], hp("a1", 8080), true},     // back
		{pods[0], hp("b1", 8080), false},    // another project (multitenant)
		{pods[3], hp("a3", 8080), false},    // and back, on one node
		{pods[4], hp("a3", 8080), true},     // host network → pod on another node
		{pods[5], hp("a3", 8080), true},     // host network → pod on its node
		{pods[0], hp("host2", 18080), true}, // pod → host network on another node
		{pods[3], hp("host2", 18080), true}, // pod → host network on its node
	} {
		err := connect(tc.from, tc.to)
		if (err == nil) != tc.want {
			t.Errorf("%s → %s: %v, want reachable=%v", tc.from.name, tc.to, err, tc.want)
		}
	}

	// A Service in alpha, DNATed by kube-proxy, with its EndpointSlice
	// from the real controller.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "alpha"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web-alpha"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}
	svc, err = kc.CoreV1().Services("alpha").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80).String()
	// kube-proxy programs the Service within a few seconds.
	if err := testutil.Poll(30*time.Second, "a3 → Service "+vip, func() (bool, error) {
		err := connect(pods[2], vip)
		return err == nil, err
	}); err != nil {
		t.Error(err)
	}
	if err := connect(pods[3], vip); err == nil {
		t.Errorf("b1 (project beta) reached alpha's Service %s", vip)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
