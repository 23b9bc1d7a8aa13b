package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/internal/sched"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/tap/uring"
	"github.com/gvswitch/gvs/vxlan"
)

// checkSchedSlice checks that every thread of node i's daemon, whose
// schedSliceWhen is "always", runs with the default schedSlice, on a
// kernel with per-thread slices (the test's own thread reports its slice
// there), and that show says so.
func checkSchedSlice(t *testing.T, c *cluster.Cluster, i int) {
	t.Helper()
	show := showJSON(t, c, i).SchedSlice
	if own, err := sched.Slice(0); err != nil || own == 0 {
		if !strings.HasPrefix(show, "kernel default") {
			t.Errorf("show: thread time slice %q on a kernel without per-thread slices", show)
		}
		return
	}
	if want := daemon.DefaultSchedSlice.String() + " always"; show != want {
		t.Errorf("show: thread time slice %q, want %q", show, want)
	}
	pid := c.DataplanePIDs(i)[0]
	var wrong []string
	// New threads get it within a sweep (200 ms).
	if testutil.Eventually(2*time.Second, func() bool {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		wrong = wrong[:0]
		for _, e := range ents {
			tid, _ := strconv.Atoi(e.Name())
			if d, err := sched.Slice(tid); err == nil && d != daemon.DefaultSchedSlice {
				wrong = append(wrong, fmt.Sprintf("%d: %v", tid, d))
			}
		}
		return len(wrong) == 0
	}) {
		return
	}
	t.Errorf("daemon threads without the %v slice: %v", daemon.DefaultSchedSlice, wrong)
}

// TestQueues: with "queues": 2, vxlan0 has two readers (each with its
// flow queues' sockets, all sharing the VXLAN port), each static pod's
// eth0 is a TAP with two queues, the pod's kernel sends its flows over
// both queues (so both workers of the pod port read), and traffic crosses
// nodes intact. Each queue goes through the I/O
// engine the daemon reports (io_uring where the kernel has it), and every
// thread of node 1's daemon has the default scheduler slice
// (schedSliceWhen always; node 2 has it only under CPU pressure). Node 1's
// readers busy-poll up to 200 µs (busyPoll 200us): traffic crosses it
// intact and its readers polled; node 2's have the default. Node 1's pod
// queues share a receive-buffer budget of 1 MiB (rxBufferBudgetMiB), no
// more than the floors of pod a's two queues: they read with their floor
// of buffers, and the traffic is intact all the same.
func TestQueues(t *testing.T) {
	c := up(t, "qu", cluster.Spec{
		Lab:    lab.Spec{Nodes: 2, PodsPerNode: 1, Projects: []string{"default"}},
		Mode:   "subnet",
		Queues: 2,
		Configure: func(_ *cluster.Cluster, i int, cfg *daemon.Config) {
			if i == 0 {
				cfg.SchedSliceWhen = "always"
				cfg.BusyPoll = "200us"
				cfg.RxBufferBudgetMiB = 1
			}
		},
	})
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	want := "uring"
	if uring.Supported() != nil {
		want = "tap"
	}
	if got := showJSON(t, c, 0).IOEngine; got != want {
		t.Errorf("show: pod TAP I/O engine %q, want %q (ioEngine auto on this kernel)", got, want)
	}

	out, err := c.Lab.Exec(ctx(t), a.NS, "ip", "-d", "link", "show", "eth0")
	if err != nil {
		t.Fatalf("ip link: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "multi_queue") || !strings.Contains(string(out), "numqueues 2 ") {
		t.Errorf("pod eth0 is not a TAP with two queues:\n%s", out)
	}
	for i := range c.Nodes {
		out, err := c.Lab.Exec(ctx(t), c.Nodes[i].NS, "ss", "-Hlun", "sport", "=", ":4789")
		if err != nil {
			t.Fatalf("ss: %v\n%s", err, out)
		}
		// Two readers, each with its flow queues' sockets.
		if n, want := len(strings.Split(strings.TrimSpace(string(out)), "\n")), 2*vxlan.DefaultFlowQueues; n != want {
			t.Errorf("node %d: %d sockets on the VXLAN port, want %d:\n%s", i, n, want, out)
		}
		// Steered by source port, sent from a block of consecutive ports
		// (vxlan's TestSteering checks where datagrams land).
		tun := showJSON(t, c, i).Tunnel
		var lo, hi int
		if _, err := fmt.Sscanf(tun, fmt.Sprintf("%d receive sockets, steered by outer source port; send ports %%d-%%d", 2*vxlan.DefaultFlowQueues), &lo, &hi); err != nil ||
			hi-lo+1 != vxlan.DefaultSendSockets || lo%vxlan.DefaultSendSockets != 0 {
			t.Errorf("node %d: show says vxlan0 %q: want %d steered sockets and %d consecutive send ports (%v)", i, tun, 2*vxlan.DefaultFlowQueues, vxlan.DefaultSendSockets, err)
		}
	}

	if res := tcpTransfer(t, c.Lab, a, b.NS, b.IP.String(), 4<<20); !strings.Contains(res, "intact=true") {
		t.Errorf("TCP across nodes: %s", res)
	}
	// Pod a's queues hold their floors of node 1's budget (no trimming
	// yet); node 2 has the default budget.
	for i, want := range []float64{1 << 20, float64(max(64, 16*runtime.NumCPU()) << 20)} {
		body := httpGet(t, c.Nodes[i].NSPath, "127.0.0.1:9101", "/metrics")
		if v := metricValue(t, body, "gvs_rx_buffer_budget_bytes"); v != want {
			t.Errorf("node %d: receive-buffer budget %.0f bytes, want %.0f", i+1, v, want)
		}
		if v := metricValue(t, body, "gvs_rx_buffer_bytes"); v <= 0 {
			t.Errorf("node %d: no receive buffers counted after the transfer", i+1)
		}
	}
	t.Logf("node 1's receive buffers after the transfer: %s", showJSON(t, c, 0).RxBuffers)

	// 32 UDP flows from a: the pod's kernel spreads them over eth0's two
	// transmit queues, i.e. over the TAP queues gvs reads.
	bin := filepath.Join(binDir, "gvs-bench")
	sink, err := c.Lab.Start(ctx(t), b.NS, filepath.Join(t.TempDir(), "sink.log"), bin, "udp-sink", "-l", ":9000", "-t", "20s")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Stop()
	before := txQueuePackets(t, c, a)
	rxBefore := portPackets(t, c, 0, 3, "rx")
	if out, err := c.Lab.Exec(ctx(t), a.NS, bin, "udp-send", "-c", b.IP.String()+":9000", "-flows", "32", "-rate", "20000", "-t", "1s"); err != nil {
		t.Fatalf("udp-send: %v\n%s", err, out)
	}
	after := txQueuePackets(t, c, a)
	var sent uint64
	for _, q := range []string{":1", ":2"} {
		n := after[q] - before[q]
		if n < 100 {
			t.Errorf("transmit queue %s sent %d packets of 32 flows (before %v, after %v)", q, n, before, after)
		}
		sent += n
	}
	// gvs read what both queues carried: its port counted (nearly) every
	// frame the pod's queues passed to the TAP.
	var rx float64
	testutil.Eventually(5*time.Second, func() bool {
		rx = portPackets(t, c, 0, 3, "rx") - rxBefore
		return rx >= 0.99*float64(sent)
	})
	if rx < 0.99*float64(sent) {
		t.Errorf("gvs read %.0f frames from the pod's TAP; its two queues carried %d", rx, sent)
	}
	// After the traffic: the threads its busy queues' rings started too.
	checkSchedSlice(t, c, 0)
	if show := showJSON(t, c, 0).BusyPoll; !strings.HasPrefix(show, "up to 200µs per wait") || strings.Contains(show, ": 0 polls") {
		t.Errorf("node 1 show: busy polling %q, want up to 200µs and some polls after the traffic", show)
	}
	want = ""
	if runtime.NumCPU() > 1 {
		want = "up to " + daemon.DefaultBusyPoll.String() + " per wait"
	}
	if show := showJSON(t, c, 1).BusyPoll; !strings.HasPrefix(show, want) || (want == "" && show != "") {
		t.Errorf("node 2 show: busy polling %q, want the default, %q…", show, want)
	}
	// Node 2 has the default, short slices only under CPU pressure.
	if own, err := sched.Slice(0); err == nil && own != 0 {
		if show, want := showJSON(t, c, 1).SchedSlice, daemon.DefaultSchedSlice.String()+" while "; !strings.HasPrefix(show, want) {
			t.Errorf("node 2 show: thread time slice %q, want %q…", show, want)
		}
	}
	// Node 1's budget held pod a's queues back (asked only now, after the
	// UDP flows too), and the traffic above was intact all the same.
	body := httpGet(t, c.Nodes[0].NSPath, "127.0.0.1:9101", "/metrics")
	if n := metricValue(t, body, "gvs_rx_buffer_denials_total"); n == 0 {
		t.Error("node 1's 1 MiB receive-buffer budget never refused a queue")
	}
}

// txQueuePackets returns the packets sent per transmit queue of pod p's
// eth0, from the per-queue qdiscs under its mq root ("parent :1", ...).
func txQueuePackets(t *testing.T, c *cluster.Cluster, p cluster.Pod) map[string]uint64 {
	t.Helper()
	out, err := c.Lab.Exec(ctx(t), p.NS, "tc", "-s", "qdisc", "show", "dev", "eth0")
	if err != nil {
		t.Fatalf("tc: %v\n%s", err, out)
	}
	got := map[string]uint64{}
	parent := ""
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) > 0 && f[0] == "qdisc":
			parent = ""
			for i := 0; i+1 < len(f); i++ {
				if f[i] == "parent" {
					parent = f[i+1]
				}
			}
		case len(f) >= 5 && f[0] == "Sent" && parent != "":
			var n uint64
			if _, err := fmt.Sscan(f[3], &n); err != nil {
				t.Fatalf("tc: %q: %v", sc.Text(), err)
			}
			got[parent] = n
		}
	}
	return got
}

// TestQueuesCNIRestart: with "queues": 2, CNI pods (from the TAP pool) get
// TAPs with two queues; when gvs-switchd exits their TAPs stay with no
// queue attached, and the next daemon adopts them with two queues again.
func TestQueuesCNIRestart(t *testing.T) {
	c := up(t, "qr", cluster.Spec{
		Lab:     lab.Spec{Nodes: 1, PodsPerNode: 2, Projects: []string{"default"}},
		Mode:    "subnet",
		CNI:     true,
		TapPool: 2,
		Queues:  2,
	})
	p1, p2 := c.Nodes[0].Pods[0], c.Nodes[0].Pods[1]
	check := func(when string, queues int) {
		t.Helper()
		for _, p := range []cluster.Pod{p1, p2} {
			out, err := c.Lab.Exec(ctx(t), p.NS, "ip", "-d", "link", "show", "eth0")
			if err != nil {
				t.Fatalf("ip link: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "multi_queue") || !strings.Contains(string(out), fmt.Sprintf("numqueues %d ", queues)) {
				t.Errorf("%s: %s eth0 is not a multi-queue TAP with %d queues attached:\n%s", when, p.Name, queues, out)
			}
		}
	}
	check("after ADD", 2)
	if ok, out := ping(t, c.Lab, p1.NS, p2.IP, 56); !ok {
		t.Fatalf("pods do not reach each other:\n%s", out)
	}
	if err := c.StopDaemon(0); err != nil {
		t.Fatal(err)
	}
	check("daemon stopped", 0)
	if err := c.StartDaemon(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	check("after the restart", 2)
	if ok, out := ping(t, c.Lab, p1.NS, p2.IP, 56); !ok {
		t.Errorf("pods do not reach each other after the restart:\n%s", out)
	}
}
