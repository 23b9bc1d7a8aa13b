package floor_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/compare"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// underlay is these tests' underlay network; it exists only inside the
// namespaces they create.
var underlay = netip.MustParsePrefix("192.168.236.0/24")

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// bins builds gvs-bench (whose floor command the cluster runs),
// gvs-switchd and gvsctl once for the tests, into a directory removed at
// the end of the first test that asked.
func bins(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and TAPs")
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "gvs-floor-bin-"); binErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", binDir+"/", "github.com/gvswitch/gvs/cmd/gvs-bench",
			"github.com/gvswitch/gvs/cmd/gvs-switchd", "github.com/gvswitch/gvs/cmd/gvsctl").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// TestFloorForwards brings up two floor nodes of two pods each and checks
// that pods reach each other across the tunnel and on one node (ping),
// and that a TCP transfer across arrives intact (super-frames cut at the
// tunnel and merged again).
func TestFloorForwards(t *testing.T) {
	bin := bins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cluster.Spec{
		Lab:        lab.Spec{Prefix: fmt.Sprintf("gvtfl%d", os.Getpid()%100000), Nodes: 2, PodsPerNode: 2, Underlay: underlay},
		Mode:       "subnet",
		BinDir:     bin,
		Dataplanes: []string{cluster.DataplaneFloor, cluster.DataplaneFloor},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.Nodes {
				log, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), n.Name+".log"))
				t.Logf("--- %s log ---\n%s", n.Name, log)
			}
		}
		if err := c.Down(); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	if pids := c.DataplanePIDs(0); len(pids) != 1 {
		t.Errorf("DataplanePIDs(0) = %v, want the floor's", pids)
	}
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	local := c.Nodes[0].Pods[1]
	for _, d := range [][2]cluster.Pod{{a, b}, {b, a}, {a, local}} {
		if _, err := lab.Ping(ctx, c.Lab, d[0].NS, d[1].IP, 0, 3); err != nil {
			t.Fatalf("ping %s → %s: %v", d[0].Name, d[1].IP, err)
		}
	}
	// MAC as gvs gives it, so that the pods' neighbours match gvs's.
	if out, err := c.Lab.Exec(ctx, a.NS, "ip", "-br", "link", "show", "eth0"); err != nil || !bytes.Contains(out, []byte("0a:58:")) {
		t.Errorf("pod eth0: %s (%v), want MAC 0a:58:<IP>", out, err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	srv, err := c.Lab.Start(sctx, b.NS, "", filepath.Join(bin, "gvs-bench"), "tcp-server", "-l", ":5201")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	var out []byte
	for range 30 {
		time.Sleep(100 * time.Millisecond) // paces the retries while the server starts (a refused connect is retried)
		out, err = c.Lab.Exec(ctx, a.NS, filepath.Join(bin, "gvs-bench"), "tcp-client", "-c", netip.AddrPortFrom(b.IP, 5201).String(), "-bytes", "50000000")
		if err == nil || !bytes.Contains(out, []byte("refused")) {
			break
		}
	}
	if err != nil || !bytes.Contains(out, []byte("intact=true")) {
		t.Fatalf("TCP %s → %s: %v\n%s", a.Name, b.IP, err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// TestCompareFloor runs gvs-bench compare end to end on the floor and gvs,
// one short run of TCP 1 stream, and checks the report: both measured, the
// gvs/floor ratio in the table, the targets checked on the floor.
func TestCompareFloor(t *testing.T) {
	bin := bins(t)
	var progress strings.Builder
	rep, err := compare.Run(context.Background(), compare.Config{
		BinDir:     bin,
		Dataplanes: []string{cluster.DataplaneGVS, cluster.DataplaneFloor},
		Runs:       1,
		Duration:   time.Second,
		Prefix:     "gvtcf", // compare appends the dataplane and the pid
		Underlay:   underlay,
		TCP1Only:   true,
		Progress:   &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dp := range []string{"gvs", "floor"} {
		r := rep.Get(dp)
		if r == nil || r.Status != compare.StatusOK || r.TCP1Gbps <= 0 || len(r.Runs) != 1 {
			t.Fatalf("%s: %+v\n%s", dp, r, progress.String())
		}
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "gvs/floor") {
		t.Errorf("table without gvs/floor:\n%s", b.String())
	}
	for _, r := range compare.CheckTargets(rep) {
		if r.Name == "TCP 1 stream" && r.Ref == "floor" && r.Verdict == compare.NA {
			t.Errorf("TCP 1 stream vs floor not checked: %s", r.Why)
		}
	}
	t.Logf("\n%s", b.String())
}
