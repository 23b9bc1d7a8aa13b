package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/cluster"
	"github.com/gvswitch/gvs/bench/lab"
	"github.com/gvswitch/gvs/sdn"
)

// restartCluster: two nodes, three pods each (projects default, alpha,
// beta), attached by CNI ADD during Up.
func restartCluster(t *testing.T, short string, tapPool int) *cluster.Cluster {
	return up(t, short, cluster.Spec{
		Lab:   lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}},
		Mode:  "multitenant",
		VNIDs: map[string]uint32{"alpha": 10, "beta": 11},
		CNI:   true, TapPool: tapPool,
	})
}

// pinger is a ping running in a pod, one echo request every 5 ms, each
// reply logged with its time (ping -D).
type pinger struct {
	proc *lab.Proc
	log  string
}

func startPinger(t *testing.T, c *cluster.Cluster, from cluster.Pod, to netip.Addr) *pinger {
	t.Helper()
	log := filepath.Join(c.Lab.StateDir(), from.Name+"-ping.log")
	p, err := c.Lab.Start(ctx(t), from.NS, log, "ping", "-D", "-n", "-i", "0.005", "-W", "1", to.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return &pinger{proc: p, log: log}
}

// replies returns the times of the replies logged so far.
func (p *pinger) replies(t *testing.T) []time.Time {
	t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "[") || !strings.Contains(line, " bytes from ") {
			continue
		}
		end := strings.IndexByte(line, ']')
		f, err := strconv.ParseFloat(line[1:end], 64)
		if err != nil {
			continue
		}
		out = append(out, time.Unix(0, int64(f*1e9)))
	}
	return out
}

// firstReplyAfter waits up to limit for a reply later than since.
func (p *pinger) firstReplyAfter(t *testing.T, since time.Time, limit time.Duration) (time.Time, bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		for _, r := range p.replies(t) {
			if r.After(since) {
				return r, true
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastReplyBefore returns the last reply before t0.
func (p *pinger) lastReplyBefore(t *testing.T, t0 time.Time) time.Time {
	var last time.Time
	for _, r := range p.replies(t) {
		if r.Before(t0) {
			last = r
		}
	}
	return last
}

// linkLine is `ip -o addr show eth0` in a pod (index, name, address).
func linkLine(t *testing.T, c *cluster.Cluster, p cluster.Pod) string {
	t.Helper()
	out, err := c.Lab.Exec(ctx(t), p.NS, "ip", "-o", "-4", "addr", "show", "dev", "eth0")
	if err != nil {
		return fmt.Sprintf("(eth0: %v %s)", err, out)
	}
	return strings.TrimSpace(string(out))
}

// cniAll runs a CNI verb for every pod of node i.
func cniAll(t *testing.T, c *cluster.Cluster, i int, verb string) {
	t.Helper()
	list, err := c.CNIConfList(i, "1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	cni := c.CNI()
	for _, p := range c.Nodes[i].Pods {
		rt := cluster.RuntimeConf(cluster.ContainerID(p), p.NSPath, "eth0", p.Project, p.Name)
		err := c.InNode(i, func() error {
			if verb == "DEL" {
				return cni.DelNetworkList(ctx(t), list, rt)
			}
			return cni.CheckNetworkList(ctx(t), list, rt)
		})
		if err != nil {
			t.Errorf("CNI %s of %s on %s: %v", verb, p.Name, c.Nodes[i].Name, err)
		}
	}
}

// flows counts node i's rules matching a dump-flows filter.
func flows(t *testing.T, c *cluster.Cluster, i int, filter string) int {
	t.Helper()
	var fs []json.RawMessage
	if err := json.Unmarshal([]byte(ctl(t, c, i, "-o", "json", "dump-flows", filter)), &fs); err != nil {
		t.Fatal(err)
	}
	return len(fs)
}

// persistentTAPs counts persistent TAPs in a namespace.
func persistentTAPs(t *testing.T, c *cluster.Cluster, ns string) int {
	t.Helper()
	out, err := c.Lab.Exec(ctx(t), ns, "ip", "-d", "-o", "link", "show", "type", "tun")
	if err != nil {
		t.Fatalf("ip link in %s: %v %s", ns, err, out)
	}
	return strings.Count(string(out), "persist on")
}

func nodeLeases(t *testing.T, c *cluster.Cluster, i int) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(c.CNIStateDir(i), "ipam"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestRestartKeepsPods: gvs-switchd on one node is stopped (SIGTERM, as
// for an upgrade) and started again; the pods keep eth0 while it is down
// and reach each other again, with no CNI call, within a few seconds;
// isolation holds; CHECK passes. Then DEL of every pod leaves no TAP,
// lease or rule.
func TestRestartKeepsPods(t *testing.T) {
	c := restartCluster(t, "rst", 2)
	testRestart(t, c, func() error { return c.StopDaemon(0) }, "stop (SIGTERM)")
}

// TestRestartAfterCrash is TestRestartKeepsPods with SIGKILL, and pod TAPs
// created inside the pods (no TAP pool).
func TestRestartAfterCrash(t *testing.T) {
	c := restartCluster(t, "rsk", 0)
	testRestart(t, c, func() error { return c.KillDaemon(0) }, "crash (SIGKILL)")
}

func testRestart(t *testing.T, c *cluster.Cluster, down func() error, how string) {
	// a (node 0) and b (node 1) are in project alpha; x (node 1) in beta.
	a, b, x := c.Nodes[0].Pods[1], c.Nodes[1].Pods[1], c.Nodes[1].Pods[2]
	if a.Project != "alpha" || b.Project != "alpha" || x.Project != "beta" {
		t.Fatalf("projects: %s %s %s", a.Project, b.Project, x.Project)
	}
	for _, d := range [][2]cluster.Pod{{a, b}, {b, a}} {
		if ok, out := ping(t, c.Lab, d[0].NS, d[1].IP, 56); !ok {
			t.Fatalf("before the restart %s does not reach %s:\n%s", d[0].Name, d[1].Name, out)
		}
	}
	podsBefore, showBefore, leasesBefore := ctl(t, c, 0, "pods"), show(t, c), nodeLeases(t, c, 0)
	linksBefore := map[string]string{}
	for _, p := range c.Nodes[0].Pods {
		linksBefore[p.Name] = linkLine(t, c, p)
		if n := persistentTAPs(t, c, p.NS); n != 1 {
			t.Errorf("%s has %d persistent TAPs, want 1 (its eth0)", p.Name, n)
		}
	}

	pg := startPinger(t, c, a, b.IP)
	if _, ok := pg.firstReplyAfter(t, time.Now(), 5*time.Second); !ok {
		t.Fatal("the pinger gets no reply before the restart")
	}
	t0 := time.Now()
	if err := down(); err != nil {
		t.Fatal(err)
	}
	tDown := time.Now()
	// While the daemon is down every pod keeps eth0 with its address.
	for _, p := range c.Nodes[0].Pods {
		if got := linkLine(t, c, p); got != linksBefore[p.Name] {
			t.Errorf("while gvs-switchd is down, %s's eth0:\n%s\nbefore:\n%s", p.Name, got, linksBefore[p.Name])
		}
	}
	tStart := time.Now()
	if err := c.StartDaemon(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	tReady := time.Now()
	first, ok := pg.firstReplyAfter(t, tStart, 5*time.Second)
	if !ok {
		t.Fatalf("no ping reply within 5 s of starting gvs-switchd again (%s)", how)
	}
	last := pg.lastReplyBefore(t, tStart)
	t.Logf("%s: daemon down %v after the signal; pings %s -> %s unanswered for %v (last reply %v after the signal, first %v after it); "+
		"daemon start to ready %v, to first reply %v",
		how, tDown.Sub(t0).Round(time.Millisecond), a.Name, b.Name, first.Sub(last).Round(time.Millisecond),
		last.Sub(t0).Round(time.Millisecond), first.Sub(t0).Round(time.Millisecond),
		tReady.Sub(tStart).Round(time.Millisecond), first.Sub(tStart).Round(time.Millisecond))
	_ = pg.proc.Stop()

	// The same interfaces (same ifindex), ports, rules and leases; no
	// CNI call was made.
	for _, p := range c.Nodes[0].Pods {
		if got := linkLine(t, c, p); got != linksBefore[p.Name] {
			t.Errorf("after the restart %s's eth0:\n%s\nbefore:\n%s", p.Name, got, linksBefore[p.Name])
		}
	}
	if got := ctl(t, c, 0, "pods"); got != podsBefore {
		t.Errorf("pods after the restart:\n%s\nbefore:\n%s", got, podsBefore)
	}
	if s := show(t, c); s != showBefore || nodeLeases(t, c, 0) != leasesBefore {
		t.Errorf("after the restart: %+v, %d leases; before %+v, %d leases", s, nodeLeases(t, c, 0), showBefore, leasesBefore)
	}
	for _, p := range c.Nodes[0].Pods {
		if n := flows(t, c, 0, sdn.PodFilter(p.IP)); n != 5 {
			t.Errorf("%s has %d rules after the restart, want 5", p.Name, n)
		}
	}
	for _, d := range [][2]cluster.Pod{{a, b}, {b, a}} {
		if ok, out := ping(t, c.Lab, d[0].NS, d[1].IP, 56); !ok {
			t.Errorf("after the restart %s does not reach %s:\n%s", d[0].Name, d[1].Name, out)
		}
	}
	if ok, out := ping(t, c.Lab, a.NS, x.IP, 56); ok {
		t.Errorf("after the restart alpha's %s reaches beta's %s:\n%s", a.Name, x.Name, out)
	}
	cniAll(t, c, 0, "CHECK")

	// DEL every pod on both nodes: nothing is left.
	for i := range c.Nodes {
		cniAll(t, c, i, "DEL")
	}
	for i, n := range c.Nodes {
		s := nodeShowOf(t, c, i)
		if s.Pods != 0 || s.Ports != 2 || nodeLeases(t, c, i) != 0 {
			t.Errorf("%s after DEL of every pod: %+v, %d leases; want no pod, ports vxlan0 and tun0 only, no lease", n.Name, s, nodeLeases(t, c, i))
		}
		for _, p := range n.Pods {
			if k := flows(t, c, i, sdn.PodFilter(p.IP)); k != 0 {
				t.Errorf("%s: %d rules of %s left", n.Name, k, p.Name)
			}
			if k := persistentTAPs(t, c, p.NS); k != 0 {
				t.Errorf("%d persistent TAPs left in %s", k, p.Name)
			}
			if out, _ := c.Lab.Exec(ctx(t), p.NS, "ip", "link", "show", "eth0"); !strings.Contains(string(out), "does not exist") {
				t.Errorf("eth0 left in %s: %s", p.Name, out)
			}
		}
		for _, v := range []uint32{10, 11} {
			if k := flows(t, c, i, sdn.VNIDFilter(v)); k != 0 {
				t.Errorf("%s: %d rules of VNID %d left", n.Name, k, v)
			}
		}
		if k := persistentTAPs(t, c, n.NS); k != 0 {
			t.Errorf("%d persistent TAPs left in %s's namespace", k, n.Name)
		}
	}
}

func nodeShowOf(t *testing.T, c *cluster.Cluster, i int) nodeShow {
	t.Helper()
	var s nodeShow
	if err := json.Unmarshal([]byte(ctl(t, c, i, "-o", "json", "show")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}
