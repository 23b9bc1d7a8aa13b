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
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// TestRealNodesFailures runs failure cases on real nodes (issue 33) and
// checks after each that every node is consistent (nodeConsistent):
// gvs-switchd's ports, the node's TAP devices, the CNI leases and the flow
// rules match the running pods, and the pods reach each other. The cases:
// pods deleted while their ADD runs; a kubelet restart; gvs-switchd's
// container killed by the runtime; a pod of a Namespace gvs has no
// NetNamespace (no VNID) for yet, refused until it has one; a node
// rebooted (its namespace torn down and made again, its disk kept).
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
	before := nodeConsistent(t, c, "fail")

	t.Run("delete-during-add", func(t *testing.T) {
		// 20 pods, each deleted 0 to 3 s after it was created (150 ms
		// apart), so that the deletions fall before, during and after
		// the pods' ADDs.
		const n = 20
		for i := range n {
			p := agnhostPod(fmt.Sprintf("brief-%d", i), c.Nodes[i%2].Name, false, nil)
			if _, err := c.Client.CoreV1().Pods("fail").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			grace := int64(0)
			if err := c.Client.CoreV1().Pods("fail").Delete(ctx, fmt.Sprintf("brief-%d", i), metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(150 * time.Millisecond) // spreading the deletions over the ADDs
		}
		sameAddresses(t, before, nodeConsistent(t, c, "fail"))
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
		sameAddresses(t, before, nodeConsistent(t, c, "fail"))
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
		sameAddresses(t, before, nodeConsistent(t, c, "fail"))
	})

	t.Run("namespace-unknown", func(t *testing.T) {
		// gvs-master gives every Namespace a NetNamespace (its VNID); with
		// gvs-master stopped, a new Namespace has none, and its pod must
		// not be attached (not with VNID 0, not with a leak) until it has.
		masters := scaleMaster(t, c, 0)
		t.Cleanup(func() { scaleMaster(t, c, masters) })
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fail-new"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := agnhostPod("stranger", c.Nodes[0].Name, false, nil)
		if _, err := c.Client.CoreV1().Pods("fail-new").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		refused := waitFor(t, 2*time.Minute, func(ctx context.Context) (string, bool) {
			evs, err := c.Client.CoreV1().Events("fail-new").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=stranger"})
			if err != nil {
				return err.Error(), false
			}
			for _, e := range evs.Items {
				if strings.Contains(e.Message, "no NetNamespace") {
					return e.Message, true
				}
			}
			return fmt.Sprintf("%d events, none says no NetNamespace", len(evs.Items)), false
		})
		t.Logf("the pod's ADD refused: %s", refused)
		got, err := c.Client.CoreV1().Pods("fail-new").Get(ctx, "stranger", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.PodIP != "" || got.Status.Phase == corev1.PodRunning {
			t.Fatalf("the pod of a Namespace without a NetNamespace: %s, address %q", got.Status.Phase, got.Status.PodIP)
		}
		scaleMaster(t, c, masters)
		// gvs-master creates the NetNamespace; the kubelet's next try
		// attaches the pod. No lease, port or TAP of the refused tries
		// may be left (nodeConsistent counts them as leaks).
		sameAddresses(t, before, nodeConsistent(t, c, "fail", "fail-new"))
		grace := int64(0)
		if err := c.Client.CoreV1().Pods("fail-new").Delete(ctx, "stranger", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
		sameAddresses(t, before, nodeConsistent(t, c, "fail"))
	})

	t.Run("node-rebooted", func(t *testing.T) {
		// The second node (the first runs the API server) reboots: its
		// processes killed, its /run emptied, its network namespace torn
		// down and made again; its disk (leases included) stays.
		nd := c.Nodes[1]
		net, err := networkv1.NewForConfig(c.Server.Admin())
		if err != nil {
			t.Fatal(err)
		}
		hsBefore, err := net.HostSubnets().Get(ctx, nd.Name)
		if err != nil {
			t.Fatal(err)
		}
		containers := func(ctx context.Context) (map[string]string, error) {
			list, err := c.Client.CoreV1().Pods("fail").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nd.Name})
			if err != nil {
				return nil, err
			}
			ids := map[string]string{}
			for _, p := range list.Items {
				for _, cs := range p.Status.ContainerStatuses {
					ids[p.Name] = cs.ContainerID
				}
			}
			return ids, nil
		}
		old, err := containers(ctx)
		if err != nil || len(old) != 2 {
			t.Fatalf("the pods of %s: %v %v", nd.Name, old, err)
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		start := time.Now()
		if err := c.RebootNode(rctx, nd); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s rebooted in %v", nd.Name, time.Since(start).Round(time.Millisecond))
		// The kubelet recreates the node's pods: new containers (in new
		// sandboxes), not the pods' statuses from before the reboot.
		waitFor(t, 3*time.Minute, func(ctx context.Context) (string, bool) {
			ids, err := containers(ctx)
			if err != nil {
				return err.Error(), false
			}
			for name, id := range old {
				if ids[name] == id || ids[name] == "" {
					return fmt.Sprintf("pod %s: container %q, before the reboot %q", name, ids[name], id), false
				}
			}
			return "", true
		})
		after := nodeConsistent(t, c, "fail")
		hsAfter, err := net.HostSubnets().Get(ctx, nd.Name)
		if err != nil {
			t.Fatal(err)
		}
		if hsAfter.Subnet != hsBefore.Subnet || hsAfter.UID != hsBefore.UID {
			t.Errorf("HostSubnet %s was %s (%s), now %s (%s)", nd.Name, hsBefore.Subnet, hsBefore.UID, hsAfter.Subnet, hsAfter.UID)
		}
		// Every pod has the address it had: the other node's kept theirs,
		// and the rebooted node's new sandboxes got theirs back (the
		// kubelet DELs a pod's old sandbox, releasing its lease, before it
		// ADDs the new one, and the IPAM gives a pod its released address
		// back); the old sandboxes' leases are gone (nodeConsistent: the
		// leases are the running pods' addresses).
		sameAddresses(t, before, after)
	})
}

// scaleMaster sets gvs-master's replicas, waits until that many of its pods
// are ready (or, for 0, until none is left), and returns the replicas it
// had.
func scaleMaster(t *testing.T, c *kubetest.Cluster, replicas int32) int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deps := c.Client.AppsV1().Deployments("gvs")
	sc, err := deps.GetScale(ctx, "gvs-master", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	had := sc.Spec.Replicas
	sc.Spec.Replicas = replicas
	if _, err := deps.UpdateScale(ctx, "gvs-master", sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, func(ctx context.Context) (string, bool) {
		list, err := c.Client.CoreV1().Pods("gvs").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gvs-master"})
		if err != nil {
			return err.Error(), false
		}
		ready := 0
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && podReady(&p) {
				ready++
			}
		}
		if replicas == 0 {
			return fmt.Sprintf("%d gvs-master pods left", len(list.Items)), len(list.Items) == 0
		}
		return fmt.Sprintf("%d of %d gvs-master pods ready", ready, replicas), ready >= int(replicas)
	})
	return had
}

// waitFor polls f (each call bounded by probeTimeout) until it says done
// or within passes, and then fails the test with f's last word.
func waitFor(t *testing.T, within time.Duration, f func(ctx context.Context) (string, bool)) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		msg, done := f(ctx)
		cancel()
		if done {
			return msg
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, msg)
		}
		time.Sleep(time.Second) // polling the cluster
	}
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

// nodeConsistent polls every node (up to consistentWithin) until all are
// consistent and returns the pods' addresses by name; when it gives up it
// reports the last difference it found. A node is consistent when
//   - every pod of namespace fail on it is Running and Ready with an IP,
//     and no pod of it is still being created or deleted;
//   - gvs-switchd's ports (gvsctl pods) are those pods, one each;
//   - the CNI leases (/var/lib/gvs/ipam/*.json in the node) are their addresses;
//   - the node's namespace holds no TAP device (pods' TAPs live in the
//     pods' namespaces; tun0 is the node's own);
//   - the flow rules name no pod address but those pods' (gvsctl dump-flows);
//
// and the pods reach each other (TCP to agnhost, every pair of nodes).
// Every probe has its own short bound (probeTimeout), so one that hangs
// (a kubectl exec into a container being restarted) costs one try, not
// the whole wait.
func nodeConsistent(t *testing.T, c *kubetest.Cluster, namespaces ...string) map[string]netip.Addr {
	t.Helper()
	start := time.Now()
	deadline := start.Add(consistentWithin)
	var last error
	tries := 0
	for time.Now().Before(deadline) {
		tries++
		ips, err := checkNodes(context.Background(), c, namespaces)
		if err == nil {
			t.Logf("nodes consistent after %v (%d tries)", time.Since(start).Round(time.Second), tries)
			return ips
		}
		if last == nil || err.Error() != last.Error() {
			t.Logf("not yet consistent (%v): %v", time.Since(start).Round(time.Second), err)
		}
		last = err
		time.Sleep(2 * time.Second) // polling the nodes until the failure has settled
	}
	t.Fatalf("nodes not consistent after %v (%d tries); last difference: %v", consistentWithin, tries, last)
	return nil
}

const (
	// consistentWithin bounds nodeConsistent's wait.
	consistentWithin = 4 * time.Minute
	// probeTimeout bounds one probe of checkNodes (one kubectl exec, one
	// command in a node).
	probeTimeout = 20 * time.Second
)

// probe runs f with a context bounded by probeTimeout.
func probe(ctx context.Context, f func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return f(ctx)
}

// gvsctl runs gvsctl args in the gvs-switchd container sw, with gvsctl's
// own bound on the daemon shorter than the probe's.
func gvsctl(ctx context.Context, c *kubetest.Cluster, sw string, args ...string) ([]byte, error) {
	return probe(ctx, func(ctx context.Context) ([]byte, error) {
		return c.Kubectl(ctx, append([]string{"exec", "-n", "gvs", sw, "-c", "gvs-switchd", "--", "gvsctl", "-timeout=10s"}, args...)...)
	})
}

// checkNodes is one try of nodeConsistent.
func checkNodes(ctx context.Context, c *kubetest.Cluster, namespaces []string) (map[string]netip.Addr, error) {
	lctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	list, err := c.Client.CoreV1().Pods("").List(lctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	ips := map[string]netip.Addr{}
	project := map[string]string{} // pod name → namespace
	byNode := map[string][]netip.Addr{}
	var names []string
	for _, p := range list.Items {
		if p.Spec.HostNetwork {
			continue
		}
		if !slices.Contains(namespaces, p.Namespace) {
			// gvs's own pods run on the host network; a pod of another
			// namespace is one the case expects to have no address (its
			// lease or port would show as a leak below)
			continue
		}
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(&p) || p.Status.PodIP == "" {
			return nil, fmt.Errorf("pod %s/%s not settled: %s", p.Namespace, p.Name, p.Status.Phase)
		}
		ip := netip.MustParseAddr(p.Status.PodIP)
		ips[p.Name] = ip
		project[p.Name] = p.Namespace
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], ip)
		names = append(names, p.Name)
	}
	for _, nd := range c.Nodes {
		want := byNode[nd.Name]
		slices.SortFunc(want, netip.Addr.Compare)
		sctx, cancel := context.WithTimeout(ctx, probeTimeout)
		sw, err := switchdPod(sctx, c, nd.Name)
		cancel()
		if err != nil {
			return nil, err
		}
		out, err := gvsctl(ctx, c, sw, "pods")
		if err != nil {
			return nil, fmt.Errorf("%s: gvsctl pods: %w: %s", nd.Name, err, out)
		}
		if got := addrsIn(string(out)); !slices.Equal(got, want) {
			return nil, fmt.Errorf("%s: gvs-switchd's pods %v, running pods %v", nd.Name, got, want)
		}
		out, err = probe(ctx, func(ctx context.Context) ([]byte, error) { return nd.Exec(ctx, "ls", "/var/lib/gvs/ipam") })
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
		out, err = probe(ctx, func(ctx context.Context) ([]byte, error) { return nd.Exec(ctx, "ip", "-o", "-d", "link", "show") })
		if err != nil {
			return nil, fmt.Errorf("%s: ip link: %w: %s", nd.Name, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "tun type tap") && !strings.Contains(line, ": tun0:") {
				return nil, fmt.Errorf("%s: a TAP device in the node's namespace: %s", nd.Name, line)
			}
		}
		out, err = gvsctl(ctx, c, sw, "dump-flows")
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
	// Every pod reaches every other pod of its project (multitenant mode
	// isolates projects).
	slices.Sort(names)
	for _, from := range names {
		for _, to := range names {
			if from == to || project[from] != project[to] {
				continue
			}
			addr := netip.AddrPortFrom(ips[to], 8080).String()
			out, err := probe(ctx, func(ctx context.Context) ([]byte, error) {
				return c.Kubectl(ctx, "exec", "-n", project[from], from, "--", "/agnhost", "connect", "--timeout=3s", addr)
			})
			if err != nil {
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
