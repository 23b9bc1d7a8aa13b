package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// BenchmarkPodScale: one node with many pods attached by real CNI ADDs
// (GVS_SCALE_PODS, default 250), as the I/O engine issue's scale row asks:
// gvs-switchd's resident memory before the pods, with all of them idle,
// after BUSY pod pairs (GVS_SCALE_BUSY, default 10) have each carried a
// second of bulk TCP (super-frames through their TAPs), and once they have
// been idle past trimIdle; the daemon's attach time per ADD (p50, p99,
// from its log); TCP 1 stream between two of the pods while all are
// attached. GVS_SCALE_TRIMIDLE sets the daemon's trimIdle ("0": never),
// GVS_SCALE_IOENGINE its ioEngine (uring, tap; default auto),
// GVS_SCALE_RXBUDGET its rxBufferBudgetMiB (-1: no bound; default 0).
// GVS_SCALE_CONCURRENT=D runs the busy pairs all at once for D instead of
// one after the other, and reports the daemon's peak RSS meanwhile.
//
//	go test -run '^$' -bench PodScale -benchtime 1x ./internal/e2e/
func BenchmarkPodScale(b *testing.B) {
	needRoot(b)
	pods := envInt("GVS_SCALE_PODS", 250)
	busy := min(envInt("GVS_SCALE_BUSY", 10), pods/2)
	for b.Loop() {
		benchPodScale(b, pods, busy)
	}
	b.ReportMetric(0, "ns/op")
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func benchPodScale(b *testing.B, pods, busy int) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("gvtsc%d", os.Getpid()%100000)
	// The daemon alone first: its memory before any pod.
	c0, err := cluster.Up(ctx, cluster.Spec{
		Lab:  lab.Spec{Prefix: prefix + "e", Nodes: 1, PodsPerNode: 1, Projects: []string{"default"}, Underlay: underlay},
		Mode: "subnet", BinDir: binDir, CNI: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the daemon settles before its memory is measured
	base := float64(rssKiB(b, c0.DataplanePIDs(0)[0]))
	if err := c0.Down(); err != nil {
		b.Fatal(err)
	}

	start := time.Now()
	trimIdle := daemon.DefaultTrimIdle
	if v := os.Getenv("GVS_SCALE_TRIMIDLE"); v != "" { // "0": the daemon never trims
		if trimIdle, err = time.ParseDuration(v); err != nil {
			b.Fatal(err)
		}
	}
	rxBudget := 0
	if v := os.Getenv("GVS_SCALE_RXBUDGET"); v != "" {
		if rxBudget, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	c, err := cluster.Up(ctx, cluster.Spec{
		Lab:  lab.Spec{Prefix: prefix, Nodes: 1, PodsPerNode: pods, Projects: []string{"default"}, Underlay: underlay},
		Mode: "subnet", BinDir: binDir, CNI: true,
		Configure: func(_ *cluster.Cluster, _ int, cfg *daemon.Config) {
			cfg.TrimIdle = trimIdle.String()
			cfg.IOEngine = os.Getenv("GVS_SCALE_IOENGINE") // "": auto
			cfg.RxBufferBudgetMiB = rxBudget
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Down()
	b.Logf("%d pods attached in %v", pods, time.Since(start).Round(time.Second))
	pid := c.DataplanePIDs(0)[0]
	time.Sleep(2 * time.Second) // the daemon settles before its memory is measured
	idle := float64(rssKiB(b, pid))

	// The daemon's attach time per ADD, from its log.
	log, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), c.Nodes[0].Name+".log"))
	var att []time.Duration
	for _, m := range attachRE.FindAllSubmatch(log, -1) {
		if d, err := time.ParseDuration(string(m[1])); err == nil {
			att = append(att, d)
		}
	}
	if len(att) != pods {
		b.Errorf("%d attach times in the daemon's log, want %d", len(att), pods)
	}

	// Bulk TCP through busy pod pairs, one after the other.
	ps := c.Nodes[0].Pods
	bench := filepath.Join(binDir, "gvs-bench")
	tcp := func(src, dst cluster.Pod, d time.Duration) (float64, error) {
		srv, err := c.Lab.Start(ctx, dst.NS, filepath.Join(b.TempDir(), "srv-"+dst.Name+".log"), bench, "tcp-server", "-l", ":5201")
		if err != nil {
			return 0, err
		}
		defer srv.Stop()
		if err := listening(srv); err != nil { // tcp runs on goroutines of its own too
			return 0, err
		}
		out, err := c.Lab.Exec(ctx, src.NS, bench, "tcp-client", "-c", dst.IP.String()+":5201", "-t", d.String())
		m := gbpsScaleRE.FindSubmatch(out)
		if err != nil || m == nil {
			return 0, fmt.Errorf("tcp %s → %s: %v\n%s", src.Name, dst.Name, err, out)
		}
		g, _ := strconv.ParseFloat(string(m[1]), 64)
		return g, nil
	}
	gbps, err := tcp(ps[0], ps[1], 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	peak, together := 0.0, 0.0
	if d := os.Getenv("GVS_SCALE_CONCURRENT"); d != "" {
		// All busy pairs at once for d, the daemon's RSS sampled
		// meanwhile: what a node needs while its pods are busy together.
		dur, err := time.ParseDuration(d)
		if err != nil {
			b.Fatal(err)
		}
		type result struct {
			gbps float64
			err  error
		}
		res := make(chan result, busy)
		for k := range busy {
			go func() {
				g, err := tcp(ps[2*k], ps[2*k+1], dur)
				res <- result{g, err}
			}()
		}
		for done := 0; done < busy; {
			select {
			case r := <-res:
				if r.err != nil {
					b.Error(r.err)
				}
				together += r.gbps
				done++
			case <-time.After(250 * time.Millisecond):
				peak = max(peak, float64(rssKiB(b, pid)))
			}
		}
		if b.Failed() {
			b.FailNow()
		}
	} else {
		for k := range busy {
			if _, err := tcp(ps[2*k], ps[2*k+1], time.Second); err != nil {
				b.Fatal(err)
			}
		}
	}
	time.Sleep(time.Second) // the daemon settles before its memory is measured
	after := float64(rssKiB(b, pid))
	// Idle past trimIdle: the busy pods' workers give their buffers back,
	// and with io_uring their rings and threads (the transmit ring at the
	// second wake-up, trimIdle/4 after the first).
	time.Sleep(max(trimIdle, 10*time.Second)*3/2 + 5*time.Second) // the idle time the benchmark is about
	trimmed := float64(rssKiB(b, pid))
	threads := procStatus(b, pid, "Threads")
	maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	b.Logf("idle again: RSS %d kB (anonymous %d, file %d), %d threads, %d io_uring mappings", int(trimmed),
		procStatus(b, pid, "RssAnon"), procStatus(b, pid, "RssFile"), threads, strings.Count(string(maps), "io_uring"))
	rings := func() (rx, tx float64, ok bool) {
		body := httpGet(b, c.Nodes[0].NSPath, "127.0.0.1:9101", "/metrics")
		if !strings.Contains(body, "gvs_io_uring_rings") {
			return 0, 0, false // ioEngine tap
		}
		return metricValue(b, body, `gvs_io_uring_rings{direction="receive"}`),
			metricValue(b, body, `gvs_io_uring_rings{direction="transmit"}`), true
	}
	if rx, tx, ok := rings(); ok {
		b.Logf("idle again: %.0f receive and %.0f transmit io_uring rings (gvs_io_uring_rings)", rx, tx)
		// A queue's rings go at the trimmer's wake-ups after its reader's
		// last batch (the transmit ring at the second), and the last
		// batches of 125 streams ending together (FINs, ACKs,
		// retransmissions) may come seconds after they end; a wake-up
		// made early while the budget refused buffers restarts the
		// transmit ring's count. Every ring must be gone within another
		// trimIdle and 10 s: one still held then is a leak.
		if trimIdle > 0 && rx+tx > 0 {
			start := time.Now()
			for rx+tx > 0 && time.Since(start) < max(trimIdle, 10*time.Second)+10*time.Second {
				time.Sleep(time.Second) // a poll of /metrics a second, over a wait of tens of seconds
				rx, tx, _ = rings()
			}
			if rx+tx > 0 {
				b.Errorf("%v later still %.0f receive and %.0f transmit io_uring rings: a queue keeps its rings idle", time.Since(start).Round(time.Second), rx, tx)
			} else {
				b.Logf("every io_uring ring given back %v later", time.Since(start).Round(time.Second))
			}
		}
	}

	pct := func(lat []time.Duration, p int) float64 {
		if len(lat) == 0 {
			return 0
		}
		slices.Sort(lat)
		return float64(lat[(len(lat)-1)*p/100]) / 1e6
	}
	b.ReportMetric(base/1024, "rss-base-MiB")
	b.ReportMetric(idle/1024, "rss-idle-MiB")
	b.ReportMetric((idle-base)/float64(pods), "KiB/idle-pod")
	b.ReportMetric(after/1024, "rss-busy-MiB")
	b.ReportMetric((after-idle)/float64(2*busy), "KiB/busy-pod")
	if peak > 0 {
		b.ReportMetric(peak/1024, "rss-peak-busy-MiB")
		b.ReportMetric(together, "busy-total-Gbit/s")
	}
	b.ReportMetric(trimmed/1024, "rss-trimmed-MiB")
	b.ReportMetric((trimmed-idle)/float64(2*busy), "KiB/busy-pod-idle-again")
	b.ReportMetric(pct(att, 50), "attach-p50-ms")
	b.ReportMetric(pct(att, 99), "attach-p99-ms")
	b.ReportMetric(gbps, "tcp-Gbit/s")
	b.ReportMetric(float64(threads), "threads-idle-again")
}

var gbpsScaleRE = regexp.MustCompile(`([0-9.]+) Gbit/s, intact=true`)
