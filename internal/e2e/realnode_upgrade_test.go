package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/kubetest"
)

// TestRealNodesUpgrade is a live upgrade as an administrator does it, on
// real nodes: a rolling update of the gvs-node DaemonSet to another image
// reference (gvs's image tagged a second time in every node's containerd,
// so that the runtime starts a new image reference, not the same one),
// then `kubectl rollout undo`. Two pods on different nodes keep a TCP
// connection open (HTTP keep-alive, a request every 100 ms) and "ping"
// each other every 10 ms, both ways (a UDP echo to agnhost netexec: the
// image has no ping). Asserted for each rollout: the TCP connection is the
// same one and answers throughout; at most one ping is lost per node
// upgraded in each direction; every new gvs-switchd took over by handoff;
// the old pods are gone and the new ones Ready with the new image; the
// nodes have the same links and CNI leases as before (nothing leaked).
func TestRealNodesUpgrade(t *testing.T) {
	c := startRealCluster(t, "up", "multitenant")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	kc := c.Client
	n1, n2 := c.Nodes[0].Name, c.Nodes[1].Name

	// The second image reference, in every node's runtime.
	const v2 = "docker.io/library/gvs:upgrade"
	var v1 string
	for _, nd := range c.Nodes {
		out, err := nd.Exec(ctx, kubetest.CtrBinary, "-a", "/run/containerd/containerd.sock", "-n", "k8s.io", "images", "ls", "-q")
		if err != nil {
			t.Fatalf("%s: ctr images ls: %v\n%s", nd.Name, err, out)
		}
		for _, ref := range strings.Fields(string(out)) {
			if strings.HasSuffix(ref, "/gvs:devel") {
				v1 = ref
			}
		}
		if v1 == "" {
			t.Fatalf("%s: no gvs:devel image in containerd:\n%s", nd.Name, out)
		}
		if out, err := nd.Exec(ctx, kubetest.CtrBinary, "-a", "/run/containerd/containerd.sock", "-n", "k8s.io", "images", "tag", "--force", v1, v2); err != nil {
			t.Fatalf("%s: ctr images tag: %v\n%s", nd.Name, err, out)
		}
	}

	// Two pods on different nodes, Running and Ready.
	ips := map[string]netip.Addr{}
	for name, node := range map[string]string{"pa": n1, "pb": n2} {
		if _, err := kc.CoreV1().Pods("default").Create(ctx, agnhostPod(name, node, false, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"pa", "pb"} {
		for {
			pod, err := kc.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err == nil && pod.Status.Phase == corev1.PodRunning && podReady(pod) && pod.Status.PodIP != "" {
				ips[name] = netip.MustParseAddr(pod.Status.PodIP)
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("pod %s not running: %v", name, err)
			}
			time.Sleep(200 * time.Millisecond) // polling the API server for the pod's status
		}
	}
	nsA := podNetns(ctx, t, c.Nodes[0], "pa")
	nsB := podNetns(ctx, t, c.Nodes[1], "pb")
	t.Logf("pa %s on %s, pb %s on %s", ips["pa"], n1, ips["pb"], n2)

	before := nodeInventory(ctx, t, c)
	for i, phase := range []struct{ name, image string }{{"rollout", "gvs:upgrade"}, {"undo", "gvs:devel"}} {
		t.Run(phase.name, func(t *testing.T) {
			tcp := startKeepAlive(ctx, t, nsA, netip.AddrPortFrom(ips["pb"], 8080))
			ab := startUDPPinger(ctx, t, nsA, netip.AddrPortFrom(ips["pb"], 8081))
			ba := startUDPPinger(ctx, t, nsB, netip.AddrPortFrom(ips["pa"], 8081))
			time.Sleep(time.Second) // a second of pings before, as a baseline
			old := daemonPods(ctx, t, c)
			oldLogs := followLogs(ctx, c, old)
			start := time.Now()
			var out []byte
			var err error
			if i == 0 {
				out, err = c.Kubectl(ctx, "-n", "gvs", "set", "image", "ds/gvs-node", "gvs-switchd="+phase.image)
			} else {
				out, err = c.Kubectl(ctx, "-n", "gvs", "rollout", "undo", "ds/gvs-node")
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			perNode := watchNodeUpgrades(ctx, c, old)
			if out, err := c.Kubectl(ctx, "-n", "gvs", "rollout", "status", "ds/gvs-node", "--timeout=5m"); err != nil {
				t.Fatalf("rollout status: %v\n%s", err, out)
			}
			took := time.Since(start)
			times := perNode()
			time.Sleep(time.Second) // a second of pings after
			sentAB, lostAB, runsAB := ab.stop()
			sentBA, lostBA, runsBA := ba.stop()
			reqs, tcpErr := tcp.stop()
			t.Logf("%s to %s: rollout status done after %v; per node (new pod created to old pod gone) %v; pings pa→pb %d sent %d lost %v, pb→pa %d sent %d lost %v (runs of lost pings at UTC times); TCP connection: %d requests on one connection",
				phase.name, phase.image, took.Round(time.Millisecond), times, sentAB, lostAB, runsAB, sentBA, lostBA, runsBA, reqs)
			if tcpErr != nil {
				t.Errorf("the TCP connection did not survive: %v", tcpErr)
			}
			nodes := len(c.Nodes)
			if lostAB > nodes || lostBA > nodes {
				// Met since the successor waits for the API server's
				// remote nodes before it takes over (docs/operations.md,
				// "Through the DaemonSet, on real nodes"); the log lines
				// below say when the new daemons added the other node.
				t.Errorf("pings lost: pa→pb %d, pb→pa %d; want at most %d (one per node upgraded)", lostAB, lostBA, nodes)
			}
			for node, l := range oldLogs() {
				t.Logf("%s: the old gvs-switchd's log from the change on:\n%s", node, l)
			}
			checkDaemonPods(ctx, t, c, old, phase.image)
			if after := nodeInventory(ctx, t, c); after != before {
				t.Errorf("the nodes' links or leases changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// podNetns returns /proc/PID/ns/net of a container of pod name on nd (the
// node's containerd runs in the machine's PID namespace).
func podNetns(ctx context.Context, t *testing.T, nd *kubetest.Node, name string) string {
	t.Helper()
	ctr := []string{kubetest.CtrBinary, "-a", "/run/containerd/containerd.sock", "-n", "k8s.io"}
	out, err := nd.Exec(ctx, append(ctr, "containers", "ls", "-q", `labels."io.kubernetes.pod.name"==`+name)...)
	if err != nil {
		t.Fatalf("ctr containers ls: %v\n%s", err, out)
	}
	ids := map[string]bool{}
	for _, id := range strings.Fields(string(out)) {
		ids[id] = true
	}
	out, err = nd.Exec(ctx, append(ctr, "tasks", "ls")...)
	if err != nil {
		t.Fatalf("ctr tasks ls: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && ids[f[0]] && f[2] == "RUNNING" {
			return "/proc/" + f[1] + "/ns/net"
		}
	}
	t.Fatalf("no running task of pod %s on %s (containers %v):\n%s", name, nd.Name, ids, out)
	return ""
}

// udpPinger sends a UDP "echo" to agnhost netexec every 10 ms from a pod's
// network namespace and counts the requests that got no answer.
type udpPinger struct {
	conn   net.Conn
	start  time.Time
	sent   atomic.Int64
	mu     sync.Mutex
	got    map[int64]bool
	done   chan struct{}
	closed chan struct{}
}

func startUDPPinger(ctx context.Context, t *testing.T, ns string, to netip.AddrPort) *udpPinger {
	t.Helper()
	conn, err := kubetest.DialIn(ns)(ctx, "udp", to.String())
	if err != nil {
		t.Fatal(err)
	}
	p := &udpPinger{conn: conn, start: time.Now(), got: map[int64]bool{}, done: make(chan struct{}), closed: make(chan struct{})}
	go func() { // answers
		buf := make([]byte, 64)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(p.closed)
				return
			}
			var seq int64
			if _, err := fmt.Sscanf(string(buf[:n]), "%d", &seq); err == nil {
				p.mu.Lock()
				p.got[seq] = true
				p.mu.Unlock()
			}
		}
	}()
	go func() { // requests
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tk.C:
				seq := p.sent.Add(1)
				_, _ = fmt.Fprintf(conn, "echo %d", seq)
			}
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return p
}

// stop stops sending, waits half a second for the last answers and
// returns how many were sent and how many got no answer, and the runs of
// lost ones ("21:25:45.680×3": three lost in a row; the time, UTC, is the
// nominal one of the first lost request, 10 ms apart from the start).
func (p *udpPinger) stop() (sent, lost int, runs []string) {
	close(p.done)
	time.Sleep(500 * time.Millisecond) // the last answers' way back
	p.conn.Close()
	<-p.closed
	n := int(p.sent.Load())
	p.mu.Lock()
	defer p.mu.Unlock()
	run := 0
	for seq := 1; seq <= n+1; seq++ {
		if seq <= n && !p.got[int64(seq)] {
			lost++
			run++
			continue
		}
		if run > 0 {
			at := p.start.Add(time.Duration(seq-run) * 10 * time.Millisecond)
			runs = append(runs, fmt.Sprintf("%s×%d", at.UTC().Format("15:04:05.000"), run))
			run = 0
		}
	}
	return n, lost, runs
}

// keepAlive sends an HTTP request every 100 ms on one TCP connection from
// a pod's network namespace; it fails if the connection breaks or is
// replaced.
type keepAlive struct {
	done chan struct{}
	end  chan struct{}
	reqs int
	err  error
}

func startKeepAlive(ctx context.Context, t *testing.T, ns string, to netip.AddrPort) *keepAlive {
	t.Helper()
	var dials atomic.Int32
	dial := kubetest.DialIn(ns)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) > 1 {
				return nil, fmt.Errorf("a second TCP connection: the first broke")
			}
			return dial(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 1,
	}
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	k := &keepAlive{done: make(chan struct{}), end: make(chan struct{})}
	get := func() error {
		resp, err := cl.Get("http://" + to.String() + "/echo?msg=alive")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var b [16]byte
		n, _ := resp.Body.Read(b[:])
		if string(b[:n]) != "alive" {
			return fmt.Errorf("answer %q", b[:n])
		}
		return nil
	}
	if err := get(); err != nil {
		t.Fatalf("the TCP connection: %v", err)
	}
	go func() {
		defer close(k.end)
		defer tr.CloseIdleConnections()
		for {
			select {
			case <-k.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if err := get(); err != nil {
				k.err = fmt.Errorf("request %d: %w", k.reqs+1, err)
				return
			}
			k.reqs++
		}
	}()
	return k
}

func (k *keepAlive) stop() (int, error) {
	close(k.done)
	<-k.end
	return k.reqs, k.err
}

// daemonPods returns the gvs-node pods by node.
func daemonPods(ctx context.Context, t *testing.T, c *kubetest.Cluster) map[string]corev1.Pod {
	t.Helper()
	l, err := c.Client.CoreV1().Pods("gvs").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gvs-node"})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]corev1.Pod{}
	for _, p := range l.Items {
		m[p.Spec.NodeName] = p
	}
	return m
}

// watchNodeUpgrades polls the gvs-node pods until the returned function is
// called, and then returns per node the time from the new pod's creation
// to the old pod's disappearance.
func watchNodeUpgrades(ctx context.Context, c *kubetest.Cluster, old map[string]corev1.Pod) func() map[string]time.Duration {
	var mu sync.Mutex
	created := map[string]time.Time{}
	gone := map[string]time.Time{}
	stop := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			l, err := c.Client.CoreV1().Pods("gvs").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gvs-node"})
			if err == nil {
				now := time.Now()
				present := map[string]bool{}
				mu.Lock()
				for _, p := range l.Items {
					present[p.Name] = true
					if o, ok := old[p.Spec.NodeName]; ok && o.Name != p.Name {
						if _, seen := created[p.Spec.NodeName]; !seen {
							created[p.Spec.NodeName] = p.CreationTimestamp.Time
						}
					}
				}
				for node, o := range old {
					if _, seen := gone[node]; !seen && !present[o.Name] {
						gone[node] = now
					}
				}
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond): // polling the API server
			}
		}
	}()
	return func() map[string]time.Duration {
		// rollout status returns when the new pods are available; the
		// last old one may still be going.
		for range 300 {
			mu.Lock()
			n := len(gone)
			mu.Unlock()
			if n == len(old) {
				break
			}
			time.Sleep(200 * time.Millisecond) // the poller above
		}
		close(stop)
		<-ended
		mu.Lock()
		defer mu.Unlock()
		m := map[string]time.Duration{}
		for node, t0 := range created {
			if t1, ok := gone[node]; ok {
				m[node] = t1.Sub(t0).Round(100 * time.Millisecond)
			}
		}
		return m
	}
}

// checkDaemonPods checks that the old gvs-node pods are gone, one new pod
// per node runs image and is Ready, and its gvs-switchd took over by
// handoff (not a restart).
func checkDaemonPods(ctx context.Context, t *testing.T, c *kubetest.Cluster, old map[string]corev1.Pod, image string) {
	t.Helper()
	now := daemonPods(ctx, t, c)
	l, _ := c.Client.CoreV1().Pods("gvs").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gvs-node"})
	if len(l.Items) != len(c.Nodes) {
		t.Errorf("%d gvs-node pods, want %d", len(l.Items), len(c.Nodes))
	}
	for _, nd := range c.Nodes {
		p, ok := now[nd.Name]
		switch {
		case !ok:
			t.Errorf("%s: no gvs-node pod", nd.Name)
			continue
		case p.Name == old[nd.Name].Name:
			t.Errorf("%s: the old pod %s is still there", nd.Name, p.Name)
		case p.Spec.Containers[0].Image != image:
			t.Errorf("%s: pod %s runs %s, want %s", nd.Name, p.Name, p.Spec.Containers[0].Image, image)
		case !podReady(&p):
			t.Errorf("%s: pod %s not Ready", nd.Name, p.Name)
		}
		logs, err := c.Kubectl(ctx, "-n", "gvs", "logs", p.Name, "-c", "gvs-switchd")
		if err != nil || !strings.Contains(string(logs), "handoff: took over") {
			t.Errorf("%s: gvs-switchd in %s did not take over by handoff: %v\n%s", nd.Name, p.Name, err, logTail2(string(logs), 20))
		}
		var lines []string
		for _, l := range strings.Split(string(logs), "\n") {
			// The handoff's phases, and when the API server's other
			// nodes reached the rules (a successor forwarding before
			// them drops cross-node traffic both ways).
			if strings.Contains(l, "handoff") || strings.Contains(l, "remote node added") || strings.Contains(l, "gvs-switchd ready") {
				lines = append(lines, l)
			}
		}
		var started time.Time
		if cs := p.Status.ContainerStatuses; len(cs) > 0 && cs[0].State.Running != nil {
			started = cs[0].State.Running.StartedAt.Time
		}
		first, _, _ := strings.Cut(string(logs), "\n")
		t.Logf("%s: %s created %s, container started %s, first log line %q; its handoff:\n%s", nd.Name, p.Name,
			p.CreationTimestamp.UTC().Format(time.TimeOnly), started.UTC().Format(time.TimeOnly), first, strings.Join(lines, "\n"))
		if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount > 0 {
			prev, _ := c.Kubectl(ctx, "-n", "gvs", "logs", "--previous", p.Name, "-c", "gvs-switchd")
			t.Errorf("%s: gvs-switchd in %s restarted %d times; the previous one:\n%s", nd.Name, p.Name,
				p.Status.ContainerStatuses[0].RestartCount, logTail2(string(prev), 30))
		}
	}
	var ds *appsv1.DaemonSet
	ds, err := c.Client.AppsV1().DaemonSets("gvs").Get(ctx, "gvs-node", metav1.GetOptions{})
	if err != nil || int(ds.Status.NumberReady) != len(c.Nodes) {
		t.Errorf("DaemonSet gvs-node: %v %+v", err, ds.Status)
	}
}

// nodeInventory lists every node's links (name and kind) and CNI leases
// (the files under /var/lib/gvs), sorted, as one string to compare.
func nodeInventory(ctx context.Context, t *testing.T, c *kubetest.Cluster) string {
	t.Helper()
	var b strings.Builder
	for _, nd := range c.Nodes {
		out, err := nd.Exec(ctx, "ip", "-j", "-d", "link", "show")
		if err != nil {
			t.Fatalf("%s: ip link: %v\n%s", nd.Name, err, out)
		}
		var links []struct {
			Name     string `json:"ifname"`
			LinkInfo struct {
				Kind string `json:"info_kind"`
			} `json:"linkinfo"`
		}
		if err := json.Unmarshal(out, &links); err != nil {
			t.Fatalf("%s: ip -j link: %v", nd.Name, err)
		}
		var names []string
		for _, l := range links {
			names = append(names, l.Name+"/"+l.LinkInfo.Kind)
		}
		sort.Strings(names)
		leases, err := nd.Exec(ctx, "sh", "-c", "find /var/lib/gvs -path '*ipam*' -type f | sort")
		if err != nil {
			t.Fatalf("%s: leases: %v\n%s", nd.Name, err, leases)
		}
		fmt.Fprintf(&b, "%s links: %s\n%s leases:\n%s", nd.Name, strings.Join(names, " "), nd.Name, leases)
	}
	return b.String()
}

// followLogs follows the gvs-switchd log of each pod in pods (kubectl logs
// -f, from now on) until the pod is gone; the returned function waits for
// the streams to end (at most 10 s) and returns what each wrote, by node.
func followLogs(ctx context.Context, c *kubetest.Cluster, pods map[string]corev1.Pod) func() map[string]string {
	var mu sync.Mutex
	var wg sync.WaitGroup
	logs := map[string]string{}
	fctx, cancel := context.WithCancel(ctx)
	for node, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, _ := c.Kubectl(fctx, "-n", "gvs", "logs", "-f", "--since=1s", p.Name, "-c", "gvs-switchd")
			mu.Lock()
			logs[node] = string(out)
			mu.Unlock()
		}()
	}
	return func() map[string]string {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cancel()
			<-done
		}
		cancel()
		mu.Lock()
		defer mu.Unlock()
		return logs
	}
}
