package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestConntrackStorm: a storm of new connections and UDP flows, far past
// the tracker's entry limit, through a stateful rule set that commits
// every connection (cluster.StatefulRules): gvs-switchd's memory stays
// flat (the table's storage is allocated once), the table stays within
// its limit (unreplied and closing connections are evicted, then commits
// are refused), and an established TCP connection keeps working all along.
func TestConntrackStorm(t *testing.T) {
	const limit = 2000
	c := up(t, "cts", cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 2, Projects: []string{"default"}},
		Mode:         "subnet",
		ConntrackMax: limit,
	})
	for i := range c.Nodes {
		if err := c.StatefulRules(ctx(t), i, true); err != nil {
			t.Fatal(err)
		}
	}
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	a2, b2 := c.Nodes[0].Pods[1], c.Nodes[1].Pods[1]
	bench := filepath.Join(binDir, "gvs-bench")
	for _, argv := range [][]string{{"tcp-server", "-l", ":5201"}, {"conn-server", "-l", ":5301"}, {"udp-sink", "-l", ":9000", "-t", "2m"}} {
		p, err := c.Lab.Start(ctx(t), b2.NS, filepath.Join(t.TempDir(), argv[0]+".log"), append([]string{bench}, argv...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop() })
	}
	iperf, err := c.Lab.Start(ctx(t), b.NS, filepath.Join(t.TempDir(), "iperf.log"), "iperf3", "-s", "-p", "5202")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { iperf.Stop() })
	pid := c.DataplanePIDs(0)[0]
	time.Sleep(time.Second) // the daemon settles before its memory is measured
	before := rssKiB(t, pid)

	// The established connection: 20 s from a to b, rate-limited so that
	// the storm has CPU to run.
	type result struct {
		out []byte
		err error
	}
	long := make(chan result, 1)
	go func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := c.Lab.Exec(cctx, a.NS, "iperf3", "-c", b.IP.String(), "-p", "5202", "-t", "20", "-b", "200M")
		long <- result{out, err}
	}()
	time.Sleep(2 * time.Second) // pacing: the long connection runs before the storm starts
	// The storm, from another pod pair: short TCP connections and UDP from
	// 10 000 source ports, each a new connection to commit.
	storm := func(argv ...string) {
		cctx, cancel := context.WithTimeout(ctx(t), time.Minute)
		defer cancel()
		if out, err := c.Lab.Exec(cctx, a2.NS, append([]string{bench}, argv...)...); err != nil {
			t.Errorf("%v: %v\n%s", argv, err, out)
		}
	}
	storm("udp-send", "-c", b2.IP.String()+":9000", "-flows", "10000", "-rate", "20000", "-t", "5s")
	storm("conn-rate", "-c", b2.IP.String()+":5301", "-t", "5s", "-workers", "8")
	var s control.ConntrackStats
	if err := json.Unmarshal([]byte(ctl(t, c, 0, "-o", "json", "conntrack-stats")), &s); err != nil {
		t.Fatal(err)
	}
	after := rssKiB(t, pid)
	t.Logf("storm: gvs-switchd RSS %d → %d KiB; tracker %+v", before, after, s)
	if s.Entries > limit || s.Max != limit {
		t.Errorf("tracker holds %d entries, limit %d (want %d)", s.Entries, s.Max, limit)
	}
	if s.Evicted == 0 && s.Reasons["table_full"] == 0 && s.Reasons["zone_full"] == 0 {
		t.Errorf("the storm never reached the limit (nothing evicted or refused): it proves nothing: %+v", s)
	}
	if grew := after - before; grew > 16<<10 {
		t.Errorf("gvs-switchd grew by %d KiB during the storm (from %d)", grew, before)
	}
	r := <-long
	if r.err != nil || !strings.Contains(string(r.out), "receiver") {
		t.Errorf("the established connection did not survive the storm: %v\n%s", r.err, r.out)
	}
}

// rssKiB returns a process's resident set in KiB.
func rssKiB(t testing.TB, pid int) int {
	t.Helper()
	return procStatus(t, pid, "VmRSS")
}

// procStatus returns the number of field key of /proc/PID/status (kB for
// the memory fields).
func procStatus(t testing.TB, pid int, key string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}
