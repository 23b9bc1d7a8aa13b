package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/kubetest"
)

// TestRealNodesFailures runs failure cases on real nodes and checks after
// each that every node is consistent (nodeConsistent): gvs-switchd's ports,
// the node's TAP devices and the CNI leases match the running pods, and
// the pods reach each other.
//
// Not done yet (issue 33, third bullet): a pod in a namespace gvs does not
// know yet, and a node reboot (it needs a kubetest helper that recreates
// one node with the same name and address). The test does not pass yet:
// on its first run nodeConsistent never settled before any failure was
// injected (the last try, kubectl exec of gvsctl pods in gvs-switchd, hung
// until the bound); the cause is not found.
func TestRealNodesFailures(t *testing.T) {
	c := startRealCluster(t, "fl", "multitenant")
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fail"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Two long-lived pods per node: they must keep their addresses through
	// every case.
	for i, nd := range c.Nodes {
		for j := range 2 {
			p := agnhostPod(fmt.Sprintf("keep-%d-%d", i, j), nd.Name, false, nil)
			if _, err := c.Client.CoreV1().Pods("fail").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := nodeConsistent(t, c)

	t.Run("delete-during-add", func(t *testing.T) {
		for i := range 20 {
			p := agnhostPod(fmt.Sprintf("brief-%d", i), c.Nodes[i%2].Name, false, nil)
			if _, err := c.Client.CoreV1().Pods("fail").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			grace := int64(0)
			if err := c.Client.CoreV1().Pods("fail").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
				t.Fatal(err)
			}
		}
		sameAddresses(t, before, nodeConsistent(t, c))
	})

	t.Run("kubelet-restart", func(t *testing.T) {
		nd := c.Nodes[1]
		if err := nd.StopKubelet(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second) // the node's pods run on without their kubelet for a while
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := nd.StartKubelet(sctx); err != nil {
			t.Fatal(err)
		}
		sameAddresses(t, before, nodeConsistent(t, c))
	})

	t.Run("switchd-killed", func(t *testing.T) {
		nd := c.Nodes[0]
		kctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		id := switchdContainer(t, kctx, nd)
		if out, err := nd.Exec(kctx, "ctr", "-n", "k8s.io", "task", "kill", "-s", "SIGKILL", id); err != nil {
			t.Fatalf("ctr task kill %s: %v: %s", id, err, out)
		}
		// The kubelet restarts it; nodeConsistent waits until it answers.
		sameAddresses(t, before, nodeConsistent(t, c))
	})
}

// switchdContainer returns the id of the running gvs-switchd container on nd.
func switchdContainer(t *testing.T, ctx context.Context, nd *kubetest.Node) string {
	t.Helper()
	out, err := nd.Exec(ctx, "ctr", "-n", "k8s.io", "containers", "list", "labels.\"io.kubernetes.container.name\"==gvs-switchd")
	if err != nil {
		t.Fatalf("ctr containers list: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if st, err := nd.Exec(ctx, "ctr", "-n", "k8s.io", "task", "ls", "id=="+f[0]); err == nil && strings.Contains(string(st), "RUNNING") {
			return f[0]
		}
	}
	t.Fatalf("no running gvs-switchd container on %s:\n%s", nd.Name, out)
	return ""
}

// sameAddresses reports pods of before whose address changed in after.
func sameAddresses(t *testing.T, before, after map[string]netip.Addr) {
	t.Helper()
	for name, ip := range before {
		if after[name] != ip {
			t.Errorf("pod %s had %s, now %v", name, ip, after[name])
		}
	}
}

var leaseFile = regexp.MustCompile(`^(\d+\.\d+\.\d+\.\d+)\.json$`)

// nodeConsistent waits (up to 3 minutes) until every node is consistent
// and returns the pods' addresses by name. A node is consistent when
//   - every pod of namespace fail on it is Running and Ready with an IP,
//     and no pod of it is still being created or deleted;
//   - gvs-switchd's ports (gvsctl pods) are those pods, one each;
//   - the CNI leases (/var/lib/gvs/NODE/ipam/*.json) are their addresses;
//   - the node's namespace holds no TAP device (pods' TAPs live in the
//     pods' namespaces; tun0 is the node's own);
//   - the flow rules name no pod address but those pods' (gvsctl dump-flows);
//
// and the pods reach each other (TCP to agnhost, every pair of nodes).
func nodeConsistent(t *testing.T, c *kubetest.Cluster) map[string]netip.Addr {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var last error
	for {
		ips, err := checkNodes(ctx, c)
		if err == nil {
			return ips
		}
		last = err
		if ctx.Err() != nil {
			t.Fatalf("nodes not consistent: %v", last)
		}
		time.Sleep(time.Second) // polling the nodes until the failure has settled
	}
}

func checkNodes(ctx context.Context, c *kubetest.Cluster) (map[string]netip.Addr, error) {
	list, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	ips := map[string]netip.Addr{}
	byNode := map[string][]netip.Addr{}
	var names []string
	for _, p := range list.Items {
		if p.Spec.HostNetwork {
			continue
		}
		if p.Namespace != "fail" {
			continue // gvs's own pods run on the host network; nothing else is scheduled
		}
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(&p) || p.Status.PodIP == "" {
			return nil, fmt.Errorf("pod %s not settled: %s", p.Name, p.Status.Phase)
		}
		ip := netip.MustParseAddr(p.Status.PodIP)
		ips[p.Name] = ip
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], ip)
		names = append(names, p.Name)
	}
	for _, nd := range c.Nodes {
		want := byNode[nd.Name]
		slices.SortFunc(want, netip.Addr.Compare)
		sw, err := switchdPod(ctx, c, nd.Name)
		if err != nil {
			return nil, err
		}
		out, err := c.Kubectl(ctx, "exec", "-n", "gvs", sw, "-c", "gvs-switchd", "--", "gvsctl", "pods")
		if err != nil {
			return nil, fmt.Errorf("%s: gvsctl pods: %w: %s", nd.Name, err, out)
		}
		if got := addrsIn(string(out)); !slices.Equal(got, want) {
			return nil, fmt.Errorf("%s: gvs-switchd's pods %v, running pods %v", nd.Name, got, want)
		}
		out, err = nd.Exec(ctx, "ls", "/var/lib/gvs/"+nd.Name+"/ipam")
		if err != nil {
			return nil, fmt.Errorf("%s: leases: %w: %s", nd.Name, err, out)
		}
		var leases []netip.Addr
		for _, f := range strings.Fields(string(out)) {
			if m := leaseFile.FindStringSubmatch(f); m != nil {
				leases = append(leases, netip.MustParseAddr(m[1]))
			}
		}
		slices.SortFunc(leases, netip.Addr.Compare)
		if !slices.Equal(leases, want) {
			return nil, fmt.Errorf("%s: leases %v, running pods %v", nd.Name, leases, want)
		}
		out, err = nd.Exec(ctx, "ip", "-o", "-d", "link", "show")
		if err != nil {
			return nil, fmt.Errorf("%s: ip link: %w: %s", nd.Name, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "tun type tap") {
				return nil, fmt.Errorf("%s: a TAP device in the node's namespace: %s", nd.Name, line)
			}
		}
		out, err = c.Kubectl(ctx, "exec", "-n", "gvs", sw, "-c", "gvs-switchd", "--", "gvsctl", "dump-flows")
		if err != nil {
			return nil, fmt.Errorf("%s: gvsctl dump-flows: %w: %s", nd.Name, err, out)
		}
		for _, a := range addrsIn(string(out)) {
			if kubetest.ClusterCIDR.Contains(a) && !slices.Contains(want, a) && a.As4()[3] != 1 && a.As4()[3] != 0 {
				// .0 is a subnet, .1 the node's gateway (tun0)
				if !slices.Contains(allAddrs(ips), a) {
					return nil, fmt.Errorf("%s: a rule names %s, no running pod's address", nd.Name, a)
				}
			}
		}
	}
	// Every pod reaches every other pod.
	slices.Sort(names)
	for _, from := range names {
		for _, to := range names {
			if from == to {
				continue
			}
			addr := netip.AddrPortFrom(ips[to], 8080).String()
			if out, err := c.Kubectl(ctx, "exec", "-n", "fail", from, "--", "/agnhost", "connect", "--timeout=3s", addr); err != nil {
				return nil, fmt.Errorf("%s → %s (%s): %w: %s", from, to, addr, err, out)
			}
		}
	}
	return ips, nil
}

func allAddrs(m map[string]netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range m {
		out = append(out, a)
	}
	return out
}

var ipv4 = regexp.MustCompile(`\b(\d+\.\d+\.\d+\.\d+)\b`)

// addrsIn returns the distinct pod-network IPv4 addresses in s, sorted,
// leaving out subnets' .0 and gateways' .1.
func addrsIn(s string) []netip.Addr {
	var out []netip.Addr
	for _, m := range ipv4.FindAllStringSubmatch(s, -1) {
		a, err := netip.ParseAddr(m[1])
		if err != nil || !kubetest.ClusterCIDR.Contains(a) || a.As4()[3] == 0 || a.As4()[3] == 1 || slices.Contains(out, a) {
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// switchdPod returns the name of the gvs-switchd pod on node.
func switchdPod(ctx context.Context, c *kubetest.Cluster, node string) (string, error) {
	list, err := c.Client.CoreV1().Pods("gvs").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node, LabelSelector: "app.kubernetes.io/name=gvs-node"})
	if err != nil {
		return "", err
	}
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && podReady(&p) && p.DeletionTimestamp == nil {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("no ready gvs-switchd on %s", node)
}
