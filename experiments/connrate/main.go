//go:build linux

// Command connrate is an experiment for issue 36's connection rate: it
// brings up the two-node lab of gvs-bench compare with one dataplane,
// installs the stateful rule set, and runs gvs-bench conn-rate between the
// load pods several times on each of several clusters, with the TCP
// counters of both pods (nstat: SYN retransmissions, retransmitted
// segments, timeouts) and the dataplane's drop counters around each run,
// so that the spread of the rate can be split into the spread between
// clusters and within one, and stalls told from slow forwarding.
//
// As root, from the repository, after make build:
//
//	go run ./experiments/connrate -bin bin -dp gvs -clusters 3 -reps 3
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gvswitch/gvs/bench/gen"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

func main() {
	bin := flag.String("bin", "bin", "directory of gvs-switchd, gvsctl, gvs-bench")
	dp := flag.String("dp", cluster.DataplaneGVS, "dataplane of both nodes")
	clusters := flag.Int("clusters", 3, "clusters, one after the other")
	reps := flag.Int("reps", 3, "conn-rate runs per cluster")
	d := flag.Duration("t", 5*time.Second, "duration of each conn-rate run")
	workers := flag.Int("workers", 16, "connections at a time")
	rules := flag.Bool("rules", true, "the stateful rule set (not on the floor)")
	perfOut := flag.String("perf", "", "perf record -a -g into this file during the first run")
	busy := flag.String("busy-poll", "", "gvs-switchd busyPoll")
	syscalls := flag.Bool("syscalls", false, "count the dataplane's system calls and context switches per connection (perf stat)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	abs, err := filepath.Abs(*bin)
	if err != nil {
		fatal(err)
	}
	for k := range *clusters {
		if err := oneCluster(ctx, abs, *dp, k, *reps, *d, *workers, *rules, *perfOut, *busy, *syscalls); err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func oneCluster(ctx context.Context, bin, dp string, k, reps int, d time.Duration, workers int, rules bool, perfOut, busy string, syscalls bool) error {
	c, err := cluster.Up(ctx, cluster.Spec{
		Lab:        lab.Spec{Prefix: fmt.Sprintf("crt%c%d", dp[0], os.Getpid()%10000), Nodes: 2, PodsPerNode: 2, Underlay: netip.MustParsePrefix("192.168.246.0/24")},
		Mode:       "subnet",
		BinDir:     bin,
		Dataplanes: []string{dp, dp},
		BusyPoll:   busy,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Down(); err != nil {
			fmt.Fprintln(os.Stderr, "down:", err)
		}
	}()
	src, dst := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	for range 10 {
		if _, err = lab.Ping(ctx, c.Lab, src.NS, dst.IP, 0, 2); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	if rules && dp != cluster.DataplaneFloor {
		for i := range c.Nodes {
			if err := c.StatefulRules(ctx, i, true); err != nil {
				return err
			}
		}
	}
	srv, err := c.Lab.Start(ctx, dst.NS, filepath.Join(c.Lab.StateDir(), "conn-server.log"), filepath.Join(bin, "gvs-bench"), "conn-server", "-l", ":5301")
	if err != nil {
		return err
	}
	defer srv.Stop()
	time.Sleep(300 * time.Millisecond)
	for r := range reps {
		sb, db := nstat(ctx, c, src.NS), nstat(ctx, c, dst.NS)
		cols0, cpu0, dp0, lab0, t0 := machineCols(), machineBusy(), dataplaneCPU(c), labCPU(), time.Now()
		var perf, stat *exec.Cmd
		var statOut bytes.Buffer
		if syscalls {
			// Count the dataplane's system calls and context switches
			// over the run, to divide by its connections.
			stat = exec.Command("perf", append([]string{"stat", "-x", ",", "-e", strings.Join(statEvents, ","), "-p", strings.Join(dataplanePIDs(c), ",")},
				"--", "sleep", strconv.Itoa(int(d.Seconds())))...)
			stat.Stderr = &statOut
			if err := stat.Start(); err != nil {
				return err
			}
		}
		if perfOut != "" && k == 0 && r == 0 {
			perf = exec.Command("perf", "record", "-a", "-g", "-o", perfOut, "--", "sleep", strconv.Itoa(int(d.Seconds())-1))
			perf.Stderr = os.Stderr
			if err := perf.Start(); err != nil {
				return err
			}
		}
		out, err := c.Lab.Exec(ctx, src.NS, filepath.Join(bin, "gvs-bench"), "conn-rate", "-c", netip.AddrPortFrom(dst.IP, 5301).String(),
			"-t", d.String(), "-workers", strconv.Itoa(workers))
		if perf != nil {
			_ = perf.Wait()
		}
		var res gen.ConnRateResult
		if err != nil || json.Unmarshal(lastLine(out), &res) != nil {
			return fmt.Errorf("conn-rate: %v: %s", err, out)
		}
		cols1, cpu1, dp1, lab1, el := machineCols(), machineBusy(), dataplaneCPU(c), labCPU(), time.Since(t0).Seconds()
		col := func(i int) float64 { return (cols1[i] - cols0[i]) / el }
		sa, da := nstat(ctx, c, src.NS), nstat(ctx, c, dst.NS)
		fmt.Printf("%s cluster %d run %d: %.0f conn/s, %d failed; machine busy %.2f CPUs, dataplane %.2f CPUs, the generator's %.2f, others' %.2f (of which niced %.2f, softirq %.2f, steal %.2f, idle %.2f) (%.1f µs per connection); client: SYN retrans %d, retrans segs %d, RTOs %d; server: SYN-ACK/other retrans %d, RTOs %d, listen drops %d\n",
			dp, k+1, r+1, res.PerSec, res.Failed, (cpu1-cpu0)/el, (dp1-dp0)/el, (lab1-lab0)/el, (cpu1-cpu0-(dp1-dp0)-(lab1-lab0))/el, col(1), col(6), col(7), col(3), 1e6*(dp1-dp0)/float64(max(res.Conns, 1)),
			sa["TcpExtTCPSynRetrans"]-sb["TcpExtTCPSynRetrans"], sa["TcpRetransSegs"]-sb["TcpRetransSegs"], sa["TcpExtTCPTimeouts"]-sb["TcpExtTCPTimeouts"],
			da["TcpRetransSegs"]-db["TcpRetransSegs"], da["TcpExtTCPTimeouts"]-db["TcpExtTCPTimeouts"], da["TcpExtListenDrops"]-db["TcpExtListenDrops"])
		if stat != nil {
			// perf stat's sleep is as long as the run, and the connections
			// counted are the run's: the quotient is per connection.
			_ = stat.Wait()
			fmt.Printf("%s cluster %d run %d per connection:%s\n", dp, k+1, r+1, perConn(statOut.Bytes(), res.Conns))
		}
	}
	if dp == cluster.DataplaneGVS {
		for i := range c.Nodes {
			for _, cmd := range []string{"stats", "conntrack-stats"} {
				out, _ := c.Ctl(ctx, i, cmd)
				fmt.Printf("node %d gvsctl %s:\n%s", i, cmd, out)
			}
		}
	}
	return nil
}

// machineCols returns /proc/stat's first line in seconds: user, nice,
// system, idle, iowait, irq, softirq, steal.
func machineCols() []float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return make([]float64, 8)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	out := make([]float64, 8)
	for i, v := range strings.Fields(line)[1:] {
		if i < 8 {
			x, _ := strconv.ParseFloat(v, 64)
			out[i] = x / 100
		}
	}
	return out
}

// machineBusy returns the machine's busy CPU seconds (/proc/stat: all
// but idle and iowait).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy float64
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy / 100 // USER_HZ
}

// dataplaneCPU returns the CPU seconds (user + system) of the processes
// whose command line names one of c's nodes' configurations: the
// dataplane's daemons.
func dataplaneCPU(c *cluster.Cluster) float64 {
	var total float64
	for _, pid := range dataplanePIDs(c) {
		total += procCPU(pid)
	}
	return total
}

// dataplanePIDs returns the process IDs of the dataplane's daemons: the
// processes whose command line names one of c's nodes' configurations.
func dataplanePIDs(c *cluster.Cluster) []string {
	ents, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte(c.Lab.StateDir()+"/")) || bytes.Contains(cmd, []byte("conn-")) || bytes.Contains(cmd, []byte("ip\x00netns")) {
			continue
		}
		pids = append(pids, e.Name())
	}
	return pids
}

// statEvents are what -syscalls counts in the dataplane's processes.
var statEvents = []string{
	"raw_syscalls:sys_enter", "context-switches",
	"syscalls:sys_enter_sendmmsg", "syscalls:sys_enter_recvmmsg", "syscalls:sys_enter_io_uring_enter",
	"syscalls:sys_enter_write", "syscalls:sys_enter_writev", "syscalls:sys_enter_read",
	"syscalls:sys_enter_futex", "syscalls:sys_enter_epoll_pwait", "syscalls:sys_enter_nanosleep",
}

// perConn formats perf stat -x's counts divided by conns.
func perConn(out []byte, conns int) string {
	var b strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if len(f) < 3 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(f[2], "syscalls:sys_enter_"), "raw_syscalls:sys_enter")
		if name == "" {
			name = "syscalls"
		}
		fmt.Fprintf(&b, " %s %.2f", name, v/float64(max(conns, 1)))
	}
	return b.String()
}

// labCPU returns the CPU seconds of the connection generator's processes
// (gvs-bench conn-server, and conn-rate through this process's waited-for
// children, which also counts the nstat and gvsctl calls): with the kernel dataplane they
// carry its forwarding too.
func labCPU() float64 {
	ents, _ := os.ReadDir("/proc")
	var total float64
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte("\x00conn-server")) {
			continue
		}
		total += procCPU(e.Name())
	}
	// conn-rate ran (and was waited for) as a child of this process.
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		total += float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	return total
}

func procCPU(pid string) float64 {
	st, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0
	}
	_, rest, _ := bytes.Cut(st, []byte(") "))
	f := strings.Fields(string(rest))
	if len(f) <= 12 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100
}

// nstat returns the absolute TCP counters of namespace ns.
func nstat(ctx context.Context, c *cluster.Cluster, ns string) map[string]int64 {
	out, _ := c.Lab.Exec(ctx, ns, "nstat", "-az")
	m := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				m[f[0]] = v
			}
		}
	}
	return m
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}
