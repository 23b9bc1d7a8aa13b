package compare

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// BenchmarkSyscallsPerWork compares what the dataplanes' processes do per
// unit of work, to tell a difference in I/O (system calls, wake-ups) from
// the machine's noise: for gvs and the floor in turn (runOrder), each on a
// fresh 2 × 2 lab, it runs TCP 4 streams and UDP 64 B (the socket
// generator) for 5 s each and counts, with perf stat, the system calls,
// context switches and task clock of both nodes' dataplane processes over
// 4 s of each. It logs every count and reports, per dataplane and
// workload, the throughput and the counts per Gbit (TCP) or per 1000
// datagrams delivered (UDP), averaged over the rounds.
//
//	sudo GVS_BENCH_BIN=DIR go test -run '^$' -bench SyscallsPerWork -benchtime 2x ./bench/compare/
//
// DIR holds gvs-bench, gvs-switchd and gvsctl (make build's bin/);
// -benchtime Nx runs N rounds. bench/results/2026-11-29-floorfix.md has
// what it found.
func BenchmarkSyscallsPerWork(b *testing.B) {
	bin := os.Getenv("GVS_BENCH_BIN")
	if bin == "" || os.Geteuid() != 0 {
		b.Skip("needs root and GVS_BENCH_BIN (a directory of gvs-bench, gvs-switchd, gvsctl)")
	}
	if _, err := exec.LookPath("perf"); err != nil {
		b.Skip("needs perf")
	}
	const d = 5 * time.Second
	cfg := Config{BinDir: bin, Duration: d, Flows: 64, Underlay: netip.MustParsePrefix("192.168.237.0/24")}
	dps := []string{cluster.DataplaneGVS, cluster.DataplaneFloor}
	sums := map[string]map[string]float64{}
	ctx := context.Background()
	for r := range b.N {
		for _, i := range runOrder(len(dps), r+1) {
			dp := dps[i]
			c, err := cluster.Up(ctx, cluster.Spec{
				Lab:  lab.Spec{Prefix: fmt.Sprintf("gvsc%c%d", dp[0], r%10), Nodes: 2, PodsPerNode: 2, Underlay: cfg.Underlay},
				Mode: "subnet", BinDir: bin, Dataplanes: []string{dp, dp},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Down() })
			e := &env{c: c, cfg: cfg, dp: dp, p: &progress{}}
			if err := e.warmUp(ctx); err != nil {
				b.Fatal(err)
			}
			src, dst := e.pods(0)
			pids := append(c.DataplanePIDs(0), c.DataplanePIDs(1)...)
			// measure runs work while perf counts the processes over its
			// seconds 1-5, and adds the counts per unit of work (work
			// returns the units: Gbit or thousands of datagrams per s).
			measure := func(name string, work func() (float64, error)) {
				ch := make(chan map[string]float64, 1)
				go func() { ch <- perfStat(b, pids, d-time.Second) }()
				v, err := work()
				counts := <-ch
				if err != nil {
					b.Fatalf("%s %s: %v", dp, name, err)
				}
				key := dp + " " + name
				if sums[key] == nil {
					sums[key] = map[string]float64{}
				}
				sums[key]["rate"] += v
				units := v * (d - time.Second).Seconds()
				var lines []string
				for _, k := range sortedKeys(counts) {
					lines = append(lines, fmt.Sprintf("%s %.0f (%.1f per unit)", k, counts[k], counts[k]/units))
					sums[key][k] += counts[k] / units
				}
				b.Logf("round %d %s: %.2f; %s", r, key, v, strings.Join(lines, ", "))
			}
			measure("TCP4", func() (float64, error) { return e.tcp(ctx, src, dst, 4, d) })
			measure("UDP64", func() (float64, error) {
				kpps, _, err := e.udp(ctx, src, dst, 64)
				return kpps, err
			})
			if err := c.Down(); err != nil {
				b.Error(err)
			}
		}
	}
	for key, m := range sums {
		unit := "Gbit"
		if strings.HasSuffix(key, "UDP64") {
			unit = "kdgram"
		}
		k := strings.ReplaceAll(key, " ", "-")
		b.ReportMetric(m["rate"]/float64(b.N), k+"-"+unit+"/s")
		for _, c := range []string{"io_uring_enter", "sendmmsg", "recvmmsg", "context-switches", "task-clock"} {
			b.ReportMetric(m[c]/float64(b.N), k+"-"+c+"/"+unit)
		}
	}
}

// perfStat counts, for the processes pids over d starting a second from
// now (when the workload runs), each system call (by name), the context
// switches and the task clock (ms), summed over the processes; the counts
// that are not 0.
func perfStat(b *testing.B, pids []int, d time.Duration) map[string]float64 {
	time.Sleep(time.Second) // paces: the workload started beside it gets a second to run before counting
	var ps []string
	for _, p := range pids {
		ps = append(ps, strconv.Itoa(p))
	}
	out, err := exec.Command("perf", "stat", "-x,", "-e", "syscalls:sys_enter_*,context-switches,task-clock",
		"-p", strings.Join(ps, ","), "--", "sleep", strconv.FormatFloat(d.Seconds(), 'f', 1, 64)).CombinedOutput()
	if err != nil {
		b.Errorf("perf stat: %v: %s", err, out)
		return nil
	}
	counts := map[string]float64{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Split(l, ",")
		if len(f) < 3 {
			continue
		}
		if n, err := strconv.ParseFloat(f[0], 64); err == nil && n > 0 {
			counts[strings.TrimPrefix(f[2], "syscalls:sys_enter_")] = n
		}
	}
	return counts
}

// sortedKeys returns m's keys, the largest value first.
func sortedKeys(m map[string]float64) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	return keys
}
