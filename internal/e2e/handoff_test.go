package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/handoff"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/netconf"
	"golang.org/x/sys/unix"
)

// pingSeqs returns the sequence numbers of the replies a ping logged (-D),
// each with its time, in log order.
func pingSeqs(t *testing.T, log string) (seqs []int, at []time.Time) {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, "icmp_seq=")
		if !strings.HasPrefix(line, "[") || i < 0 || !strings.Contains(line, " bytes from ") || strings.Contains(line, "DUP!") {
			continue
		}
		f, err := strconv.ParseFloat(line[1:strings.IndexByte(line, ']')], 64)
		if err != nil {
			continue
		}
		rest := line[i+len("icmp_seq="):]
		if j := strings.IndexByte(rest, ' '); j > 0 {
			rest = rest[:j]
		}
		n, err := strconv.Atoi(rest)
		if err != nil {
			continue
		}
		seqs = append(seqs, n)
		at = append(at, time.Unix(0, int64(f*1e9)))
	}
	return seqs, at
}

// lostPings counts the sequence numbers missing from seqs (the replies
// pingSeqs read, in any order, duplicates allowed) between the first one
// and the highest: lost of span sent. Pings before the first reply or
// after the last are not counted (they are the window's edges, not
// losses). No reply: 0 of 0.
func lostPings(seqs []int) (lost, span int) {
	if len(seqs) == 0 {
		return 0, 0
	}
	got := map[int]bool{}
	for _, s := range seqs {
		got[s] = true
	}
	lo, hi := seqs[0], slices.Max(seqs)
	for s := lo; s <= hi; s++ {
		if !got[s] {
			lost++
		}
	}
	return lost, hi - lo + 1
}

// tcpPair opens a TCP connection from pod a to a listener in pod b, the
// sockets made inside the pods' namespaces (they stay there), and returns
// both ends.
func tcpPair(t *testing.T, a, b cluster.Pod) (net.Conn, net.Conn) {
	t.Helper()
	var ln net.Listener
	addr := netip.AddrPortFrom(b.IP, 7777).String()
	if err := netconf.Do(b.NSPath, func() (err error) { ln, err = net.Listen("tcp4", addr); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var ca net.Conn
	if err := netconf.Do(a.NSPath, func() (err error) { ca, err = net.DialTimeout("tcp4", addr, 5*time.Second); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ca.Close() })
	cb, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cb.Close() })
	return ca, cb
}

// exchange sends a line each way over the connection and checks it
// arrives within 5 s.
func exchange(ca, cb net.Conn, msg string) error {
	for _, d := range [][2]net.Conn{{ca, cb}, {cb, ca}} {
		_ = d[0].SetWriteDeadline(time.Now().Add(5 * time.Second))
		_ = d[1].SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := d[0].Write([]byte(msg + "\n")); err != nil {
			return fmt.Errorf("write %s: %w", msg, err)
		}
		got, err := bufio.NewReader(d[1]).ReadString('\n')
		if err != nil || got != msg+"\n" {
			return fmt.Errorf("read %s: %q %v", msg, got, err)
		}
	}
	return nil
}

// handedOverRe is the old daemon's log line at the end of a handoff.
var handedOverRe = regexp.MustCompile(`handoff: handed over; exiting.* paused=([0-9.]+[µmn]?s)`)

// TestHandoffUpgrade upgrades node 1's gvs-switchd 5 times with a live
// handoff (the new daemon starts while the old one runs; UpgradeDaemon),
// while a pod on node 1 pings a pod on node 2 every 10 ms and holds a TCP
// connection to it. Each upgrade may lose at most one ping, the TCP
// connection carries data both ways after each, and a CNI ADD sent during
// an upgrade succeeds. docs/operations.md quotes the numbers.
func TestHandoffUpgrade(t *testing.T) {
	c := up(t, "hof", cluster.Spec{Lab: lab.Spec{Nodes: 2, PodsPerNode: 1}, Mode: "subnet", CNI: true})
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	ca, cb := tcpPair(t, a, b)
	if err := exchange(ca, cb, "before"); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(c.Lab.StateDir(), a.Name+"-ping10.log")
	pg, err := c.Lab.Start(ctx(t), a.NS, log, "ping", "-D", "-n", "-i", "0.01", "-W", "2", b.IP.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	p := &pinger{proc: pg, log: log}
	if _, ok := p.firstReplyAfter(t, time.Now(), 5*time.Second); !ok {
		t.Fatal("no ping reply before the upgrades")
	}
	list, err := c.CNIConfList(0, "1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	type window struct{ from, to time.Time }
	var wins []window
	var took []time.Duration
	const upgrades = 5
	for k := range upgrades {
		time.Sleep(300 * time.Millisecond) // pacing: pings run between upgrades, so each upgrade's losses stand apart
		// During the third upgrade a CNI ADD runs: it is answered by the
		// old daemon before it pauses, or by the new one from the same
		// socket, never lost.
		addErr := make(chan error, 1)
		var nsNew string
		if k == 2 {
			nsNew = podNS(t, c, "hnew")
			rt := cluster.RuntimeConf("ctr-hnew", nsNew, "eth0", "default", "hnew")
			go func() {
				addErr <- c.InNode(0, func() error { _, err := c.CNI().AddNetworkList(ctx(t), list, rt); return err })
			}()
		} else {
			addErr <- nil
		}
		t0 := time.Now()
		if err := c.UpgradeDaemon(ctx(t), 0); err != nil {
			t.Fatalf("upgrade %d: %v", k+1, err)
		}
		took = append(took, time.Since(t0))
		if err := exchange(ca, cb, fmt.Sprintf("after upgrade %d", k+1)); err != nil {
			t.Errorf("TCP after upgrade %d: %v", k+1, err)
		}
		if err := <-addErr; err != nil {
			t.Errorf("CNI ADD during upgrade %d: %v", k+1, err)
		} else if nsNew != "" {
			if out, err := nsExec(t, nsNew, "ping", "-c", "3", "-i", "0.2", "-W", "2", b.IP.String()); err != nil {
				t.Errorf("the pod added during upgrade %d does not reach %s: %v\n%s", k+1, b.Name, err, out)
			}
		}
		wins = append(wins, window{t0, time.Now()})
	}
	time.Sleep(2500 * time.Millisecond) // late replies (-W 2)
	seqs, at := pingSeqs(t, log)
	var lostAll, gaps []int
	var gapDur []time.Duration
	for k, w := range wins {
		// The sequence range sent during the window: from the last
		// reply received before it to the first one after it.
		lo, hi := -1, -1
		var last, next time.Time
		for i, s := range seqs {
			if at[i].Before(w.from) && s > lo {
				lo, last = s, at[i]
			}
			if at[i].After(w.to) && (hi < 0 || s < hi) {
				hi, next = s, at[i]
			}
		}
		if lo < 0 || hi < 0 {
			t.Fatalf("upgrade %d: no reply before or after it", k+1)
		}
		var in []int // the replies from lo to hi, both received
		for _, s := range seqs {
			if s >= lo && s <= hi {
				in = append(in, s)
			}
		}
		lost, _ := lostPings(append([]int{lo}, in...))
		// The longest silence between two replies in the window.
		var maxGap time.Duration
		prev := last
		for i := range seqs {
			if at[i].After(last) && !at[i].After(next) {
				if g := at[i].Sub(prev); g > maxGap {
					maxGap = g
				}
				prev = at[i]
			}
		}
		lostAll = append(lostAll, lost)
		gapDur = append(gapDur, maxGap)
		gaps = append(gaps, hi-lo-1)
		if lost > 1 {
			t.Errorf("upgrade %d lost %d of %d pings (at most 1 allowed)", k+1, lost, hi-lo-1)
		}
	}
	if err := exchange(ca, cb, "at the end"); err != nil {
		t.Errorf("TCP at the end: %v", err)
	}
	var paused []time.Duration
	if b, err := os.ReadFile(filepath.Join(c.Lab.StateDir(), c.Nodes[0].Name+".log")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "handoff:") && (testing.Verbose() || strings.Contains(l, "WARN")) {
				t.Log(l)
			}
		}
		for _, m := range handedOverRe.FindAllSubmatch(b, -1) {
			if d, err := time.ParseDuration(string(m[1])); err == nil {
				paused = append(paused, d)
			}
		}
	}
	if len(paused) != upgrades {
		t.Errorf("%d handoffs logged by the old daemons, want %d", len(paused), upgrades)
	}
	t.Logf("%d live upgrades, ping every 10 ms: pings lost per upgrade %v (of %v sent in each window); "+
		"longest gap between replies %s; old daemon paused (forwarding stopped until the new one is ready) %s; "+
		"upgrade (start of the new daemon to old gone and new answering) %s",
		upgrades, lostAll, gaps, durStats(slices.Clone(gapDur)), durStatsOr(paused), durStats(slices.Clone(took)))
}

func durStatsOr(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(none logged)"
	}
	return durStats(slices.Clone(ds))
}

// TestHandoffSuccessorFails: a successor that takes the running daemon's
// descriptors and then dies, or aborts, must leave the old daemon
// forwarding again (it resumes), losing at most one ping of a 10 ms ping;
// a real upgrade works afterwards. The successor is played by the test
// through package handoff.
func TestHandoffSuccessorFails(t *testing.T) {
	c := up(t, "hff", cluster.Spec{Lab: lab.Spec{Nodes: 2, PodsPerNode: 1}, Mode: "subnet", CNI: true})
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	ca, cb := tcpPair(t, a, b)
	log := filepath.Join(c.Lab.StateDir(), a.Name+"-ping10.log")
	pg, err := c.Lab.Start(ctx(t), a.NS, log, "ping", "-D", "-n", "-i", "0.01", "-W", "2", b.IP.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	p := &pinger{proc: pg, log: log}
	if _, ok := p.firstReplyAfter(t, time.Now(), 5*time.Second); !ok {
		t.Fatal("no ping reply")
	}
	for _, how := range []string{"dies", "aborts", "stays silent"} {
		hc, err := handoff.Dial(c.HandoffSocket(0), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := hc.SendJSON(handoff.TypeHello, handoff.Hello{Version: handoff.Version, PID: os.Getpid()}); err != nil {
			t.Fatal(err)
		}
		st, fds, _, err := hc.RecvState()
		if err != nil {
			t.Fatalf("successor that %s: %v", how, err)
		}
		if len(fds) != st.Fds || len(st.Pods) != 1 {
			t.Errorf("state: %d descriptors (%d announced), %d pods", len(fds), st.Fds, len(st.Pods))
		}
		switch how {
		case "aborts":
			_ = hc.Send(handoff.TypeAbort, []byte("test: not taking over"), nil)
		case "stays silent":
			time.Sleep(300 * time.Millisecond) // the old daemon stays paused meanwhile
		}
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		hc.Close()
		t0 := time.Now()
		first, ok := p.firstReplyAfter(t, t0, 2*time.Second)
		if !ok {
			t.Fatalf("successor that %s: the old daemon did not resume", how)
		}
		t.Logf("successor that %s: first reply %v after it let go", how, first.Sub(t0).Round(time.Millisecond))
		if err := exchange(ca, cb, "after a successor that "+how); err != nil {
			t.Errorf("TCP: %v", err)
		}
	}
	if err := c.UpgradeDaemon(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	if err := exchange(ca, cb, "after the upgrade"); err != nil {
		t.Errorf("TCP: %v", err)
	}
	// Pings lost over the whole test: the silent successor held the old
	// daemon paused for 300 ms, and frames waited in the kernel meanwhile.
	time.Sleep(2500 * time.Millisecond)
	seqs, _ := pingSeqs(t, log)
	lost, span := lostPings(seqs)
	t.Logf("pings lost over 3 failed handoffs and 1 upgrade: %d of %d", lost, span)
	if lost > 4 {
		t.Errorf("%d pings lost, want at most one per handoff", lost)
	}
}

// TestHandoffFallback: a successor whose configuration cannot use the
// running daemon's tunnel sockets (another vxlanFlowQueues) asks it to
// stop and starts afresh, adopting the pods as after a restart: the
// upgrade completes, traffic resumes and the TCP connection survives.
func TestHandoffFallback(t *testing.T) {
	c := up(t, "hfb", cluster.Spec{Lab: lab.Spec{Nodes: 2, PodsPerNode: 1}, Mode: "subnet", CNI: true})
	lb := upgradeFallsBack(t, c)
	for _, want := range []string{"asks this daemon to stop", "live upgrade failed; starting afresh", "vxlan: adopt:"} {
		if !strings.Contains(string(lb), want) {
			t.Errorf("the log has no %q", want)
		}
	}
	for _, l := range strings.Split(string(lb), "\n") {
		if strings.Contains(l, "handoff") || strings.Contains(l, "starting afresh") || strings.Contains(l, "leases restored") {
			t.Log(l)
		}
	}
}

// TestHandoffWaitMode is the DaemonSet's upgrade: with "afterHandoff":
// "wait" the old daemon stays, idle, after handing over, and is stopped
// with SIGTERM later (the controller deletes its pod). Its SIGTERM must
// not disturb the new daemon: traffic and the TCP connection carry on,
// the CNI socket stays where it is and CHECK passes.
func TestHandoffWaitMode(t *testing.T) {
	c := up(t, "hfw", cluster.Spec{Lab: lab.Spec{Nodes: 2, PodsPerNode: 1}, Mode: "subnet", CNI: true})
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	ca, cb := tcpPair(t, a, b)
	editConfig(t, c, 0, func(m map[string]any) { m["afterHandoff"] = "wait" })
	if err := c.UpgradeDaemon(ctx(t), 0); err != nil { // the running one exits; the new one waits next time
		t.Fatal(err)
	}
	log := filepath.Join(c.Lab.StateDir(), a.Name+"-ping10.log")
	pg, err := c.Lab.Start(ctx(t), a.NS, log, "ping", "-D", "-n", "-i", "0.01", "-W", "2", b.IP.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	p := &pinger{proc: pg, log: log}
	if _, ok := p.firstReplyAfter(t, time.Now(), 5*time.Second); !ok {
		t.Fatal("no ping reply")
	}
	for k := range 2 {
		time.Sleep(300 * time.Millisecond) // pacing: pings run between upgrades, so each upgrade's losses stand apart
		if err := c.UpgradeDaemonWaiting(ctx(t), 0); err != nil {
			t.Fatalf("upgrade %d: %v", k+1, err)
		}
		if _, err := os.Stat(c.CNISocket(0)); err != nil {
			t.Errorf("after the old daemon's SIGTERM: CNI socket: %v", err)
		}
		if err := exchange(ca, cb, fmt.Sprintf("after upgrade %d", k+1)); err != nil {
			t.Errorf("TCP: %v", err)
		}
	}
	cniAll(t, c, 0, "CHECK")
	time.Sleep(2500 * time.Millisecond) // waits out ping -W 2, so that every lost ping is in the log
	seqs, _ := pingSeqs(t, log)
	lost, span := lostPings(seqs)
	t.Logf("2 upgrades with afterHandoff wait: %d of %d pings lost", lost, span)
	if lost > 2 {
		t.Errorf("%d pings lost over 2 upgrades", lost)
	}
	if _, err := os.Stat(filepath.Join(c.CNIStateDir(0), "conntrack.table")); err == nil {
		t.Error("an old daemon that handed over saved a connection table on SIGTERM (the next start would load stale entries)")
	}
}

// TestHandoffRegistry: live upgrades of a node that follows the etcd
// registry (gvs-master, embedded etcd): the new daemon registers, gets the
// same subnet, takes over, and the old one's exit does not take the node
// out of the registry (its lease is not revoked).
func TestHandoffRegistry(t *testing.T) {
	c := up(t, "hfr", cluster.Spec{Lab: lab.Spec{Nodes: 2, PodsPerNode: 1}, Mode: "subnet", CNI: true,
		ControlPlane: cluster.ControlPlaneEmbedded, NodeLeaseTTL: 3})
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	ca, cb := tcpPair(t, a, b)
	log := filepath.Join(c.Lab.StateDir(), a.Name+"-ping10.log")
	pg, err := c.Lab.Start(ctx(t), a.NS, log, "ping", "-D", "-n", "-i", "0.01", "-W", "2", b.IP.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	p := &pinger{proc: pg, log: log}
	if _, ok := p.firstReplyAfter(t, time.Now(), 5*time.Second); !ok {
		t.Fatal("no ping reply")
	}
	for k := range 2 {
		time.Sleep(300 * time.Millisecond) // pacing: pings run between upgrades, so each upgrade's losses stand apart
		if err := c.UpgradeDaemon(ctx(t), 0); err != nil {
			t.Fatalf("upgrade %d: %v", k+1, err)
		}
		if err := exchange(ca, cb, fmt.Sprintf("after upgrade %d", k+1)); err != nil {
			t.Errorf("TCP: %v", err)
		}
	}
	// Still reachable after the old daemons' leases (3 s) would have expired.
	time.Sleep(4 * time.Second)
	if err := exchange(ca, cb, "later"); err != nil {
		t.Errorf("TCP 4 s later: %v", err)
	}
	seqs, _ := pingSeqs(t, log)
	lost, span := lostPings(seqs)
	lb, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), c.Nodes[0].Name+".log"))
	if n := strings.Count(string(lb), "handoff: took over"); n != 2 {
		t.Errorf("%d handoffs in the log, want 2", n)
	}
	t.Logf("2 upgrades with the etcd registry: %d of %d pings lost", lost, span)
	if lost > 2 {
		t.Errorf("%d pings lost over 2 upgrades", lost)
	}
}

// upgradeFallsBack upgrades node 0's daemon with a configuration the
// running one refuses to hand over to (vxlanFlowQueues changed), so the
// successor starts afresh; it checks that pod 0 of node 0 still reaches
// pod 0 of node 1 by ping and over a TCP connection opened before, and
// returns node 0's daemon log.
func upgradeFallsBack(t *testing.T, c *cluster.Cluster) []byte {
	t.Helper()
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	ca, cb := tcpPair(t, a, b)
	editConfig(t, c, 0, func(m map[string]any) { m["vxlanFlowQueues"] = 4 })
	if err := c.UpgradeDaemon(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	if ok, out := ping(t, c.Lab, a.NS, b.IP, 56); !ok {
		t.Errorf("after the fallback:\n%s", out)
	}
	if err := exchange(ca, cb, "after the fallback"); err != nil {
		t.Errorf("TCP: %v", err)
	}
	lb, err := os.ReadFile(filepath.Join(c.Lab.StateDir(), c.Nodes[0].Name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return lb
}
