// Package compare runs the same two-node topology and workloads on several
// dataplanes — gvs, the Linux bridge with kernel vxlan, and Open vSwitch's
// userspace datapath — and reports the medians side by side, as a table,
// JSON and an SVG chart. It is `gvs-bench compare`.
package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// Statuses of a dataplane's result.
const (
	StatusOK      = "ok"
	StatusMissing = "missing" // not installed: nothing was measured
	StatusFailed  = "failed"  // could not be brought up or measured
)

// Config configures Run.
type Config struct {
	// BinDir holds gvs-switchd, gvsctl and gvs-bench (whose udp-* tools
	// run inside the pods).
	BinDir string
	// Dataplanes to compare, default gvs, kernel, ovs, floor (the floor
	// dataplane: package bench/floor).
	Dataplanes []string
	// Runs of every workload per dataplane (the report keeps the median),
	// default 3.
	Runs int
	// Duration of each workload, default 5 s.
	Duration time.Duration
	// Prefix of the lab namespaces (at most 6 characters; a dataplane letter
	// and the pid are appended), default "gvc".
	Prefix string
	// Underlay network of the lab, default 192.168.247.0/24.
	Underlay netip.Prefix
	// Flows is the number of UDP flows of the pps workloads (socket
	// generator and blaster), default 64.
	Flows int
	// BlastThreads is the number of sending threads of the frame blaster,
	// default 2. The kernel dataplane forwards a frame in the softirq of the
	// CPU that sent it, so a single sending thread caps the kernel at one
	// CPU's worth; two let it use both of the lab machine's CPUs.
	BlastThreads int
	// GVSQueues is gvs-switchd's queues setting: queues of each pod TAP
	// and receive sockets of vxlan0, one worker each; default 1.
	GVSQueues int
	// GVSVXLANReaders, if not 0, sets vxlan0's receive sockets apart
	// (gvs-switchd's vxlanReaders).
	GVSVXLANReaders int
	// GVSVXLANFlowQueues, if not 0, is gvs-switchd's vxlanFlowQueues:
	// receive sockets each vxlan0 reader drains in round robin.
	GVSVXLANFlowQueues int
	// GVSGoMaxProcs, if not 0, is gvs-switchd's goMaxProcs.
	GVSGoMaxProcs int
	// GVSIOEngine is gvs-switchd's ioEngine: how pod TAPs move frames
	// ("auto", "uring", "tap"; "" is auto).
	GVSIOEngine string
	// GVSSchedSlice and GVSSchedSliceWhen are gvs-switchd's schedSlice
	// and schedSliceWhen: the scheduler time slice of its threads ("" is
	// its default, "0" the kernel's) and when ("busy", "always").
	GVSSchedSlice, GVSSchedSliceWhen string
	// GVSBusyPoll is gvs-switchd's busyPoll: how long its readers may
	// poll an empty queue before they sleep ("": its default, "0": off).
	GVSBusyPoll string
	// Conntrack adds the connection-tracking rows: the same stateful rule
	// set on every dataplane (cluster.StatefulRules), TCP 1 stream and new
	// TCP connections per second through it. ConntrackOnly runs only
	// those and the plain TCP 1 stream they are compared with.
	Conntrack, ConntrackOnly bool
	// NetworkPolicy adds the networkpolicy row: TCP 1 stream on gvs in
	// the networkpolicy mode with NetpolPolicies policies selecting both
	// pods, on a cluster of its own (gvs-master with its embedded etcd),
	// compared with gvs's TCP 1 stream in the subnet mode of the same run.
	// NetworkPolicyOnly runs only that and the TCP 1 stream it is
	// compared with.
	NetworkPolicy, NetworkPolicyOnly bool
	// TCP1Only runs only TCP 1 stream (with its CPU per Gbit): a smoke
	// run of the whole harness, as the root tests do.
	TCP1Only bool
	// RTTOnly runs only TCP 1 stream and the round-trip rows (idle,
	// sparse ping, under one TCP stream), skipping the throughput rows
	// between them: the pod pair of the probes is then idle for seconds
	// rather than the minute or two of a full run.
	RTTOnly bool
	// BlastOnly runs only the frame blaster rows (UDP 64 B and 1400 B
	// flat out, and their highest rates without loss): the packet-rate
	// rows, measured on their own. TCP 1 stream is skipped too.
	BlastOnly bool
	// CPURate, when not 0, adds the rows UDP64CPUus and UDP1400CPUus:
	// the blaster offers this many frames/s for Duration while the
	// dataplane processes' CPU time is read before and after.
	CPURate int
	// CPUOnly, with CPURate, runs only those two rows.
	CPUOnly bool
	// NetpolPolicies is how many policies the networkpolicy row loads
	// (at least 1: the one that admits the measured traffic), default
	// NetpolPolicies.
	NetpolPolicies int
	// Progress, if not nil, receives a line per step.
	Progress io.Writer
}

// Metrics are one dataplane's numbers: of one run, or the medians.
//
// The udp* keys without "blast" come from the socket-based generator
// (gvs-bench udp-send → udp-sink: delivered to the pod's UDP socket); the
// udp*_blast_* keys from the AF_PACKET frame blaster (gvs-bench blast →
// blast-sink: delivered to the pod's interface), which the dataplane
// cannot slow down. The rtt_* keys without "ping" are the UDP prober's
// (gvs-bench udp-probe → udp-echo); rtt_ping_* are ICMP echo (iputils
// ping), taken at the same time on the same pod pair, except
// rtt_ping_sparse_*: ping alone, one request every 200 ms, the way ping is
// run by hand (the idle reference of the RTT target, ≈0.12 ms for the
// kernel, is of this kind: between two requests every CPU goes idle;
// bench/results/history.md).
type Metrics struct {
	TCP1Gbps    float64 `json:"tcp1_gbps"`
	TCP4Gbps    float64 `json:"tcp4_gbps"`
	UDP64Kpps   float64 `json:"udp64_kpps"`
	UDP64Loss   float64 `json:"udp64_loss"`
	UDP1400Kpps float64 `json:"udp1400_kpps"`
	UDP1400Loss float64 `json:"udp1400_loss"`
	// The socket generator with UDP GSO: 44 datagrams of 1400 B frames per
	// UDP_SEGMENT send (a QUIC-like sender; gvs takes it with USO).
	UDP1400GSOKpps float64 `json:"udp1400_gso_kpps"`
	UDP1400GSOLoss float64 `json:"udp1400_gso_loss"`
	RTTIdleP50us   float64 `json:"rtt_idle_p50_us"`
	RTTIdleP99us   float64 `json:"rtt_idle_p99_us"`
	RTTLoadP50us   float64 `json:"rtt_load_p50_us"`
	RTTLoadP99us   float64 `json:"rtt_load_p99_us"`
	// Blaster workloads: delivered and offered kpps, loss = 1 − delivered
	// ÷ offered.
	UDP64BlastKpps          float64 `json:"udp64_blast_kpps"`
	UDP64BlastOfferedKpps   float64 `json:"udp64_blast_offered_kpps"`
	UDP64BlastLoss          float64 `json:"udp64_blast_loss"`
	UDP1400BlastKpps        float64 `json:"udp1400_blast_kpps"`
	UDP1400BlastOfferedKpps float64 `json:"udp1400_blast_offered_kpps"`
	UDP1400BlastLoss        float64 `json:"udp1400_blast_loss"`
	// Blaster throughput (RFC 2544 style): the delivered kpps at the
	// highest offered rate found with loss ≤ 0.5 %.
	UDP64NoDropKpps   float64 `json:"udp64_nodrop_kpps"`
	UDP1400NoDropKpps float64 `json:"udp1400_nodrop_kpps"`
	// UDP64NoDropBareKpps is the same search for 64 B frames between the
	// two nodes' namespaces on the underlay: on gvs and kernel nodes veths
	// and a bridge that no dataplane touches, the ceiling of the blaster
	// on this machine (on OVS nodes eth0 is a port of OVS's br-ul).
	UDP64NoDropBareKpps float64 `json:"udp64_nodrop_bare_kpps"`
	// UDP64CPUus and UDP1400CPUus are the dataplane processes' CPU
	// microseconds per delivered frame while the blaster offers
	// Config.CPURate frames/s of 64 B (1400 B) frames, a rate both
	// dataplanes forward: the cost of a frame, less noisy than a rate
	// (0: not measured).
	UDP64CPUus   float64 `json:"udp64_cpu_us"`
	UDP1400CPUus float64 `json:"udp1400_cpu_us"`
	// ICMP ping round trips.
	RTTPingIdleP50us float64 `json:"rtt_ping_idle_p50_us"`
	RTTPingIdleP99us float64 `json:"rtt_ping_idle_p99_us"`
	RTTPingLoadP50us float64 `json:"rtt_ping_load_p50_us"`
	RTTPingLoadP99us float64 `json:"rtt_ping_load_p99_us"`
	// Sparse ping: one request every 200 ms, nothing else running.
	RTTPingSparseP50us float64 `json:"rtt_ping_sparse_p50_us"`
	RTTPingSparseP99us float64 `json:"rtt_ping_sparse_p99_us"`
	// CPUSecPerGbit is the machine's busy CPU time (all processes and
	// softirq, from /proc/stat) per Gbit carried during the 1-stream TCP
	// workload.
	CPUSecPerGbit float64 `json:"cpu_s_per_gbit"`
	// DataplaneCPUSecPerGbit counts only the dataplane's own processes
	// (gvs-switchd, ovs-vswitchd); 0 for the kernel.
	DataplaneCPUSecPerGbit float64 `json:"dataplane_cpu_s_per_gbit"`
	// With the stateful rule set (Config.Conntrack): TCP 1 stream, and
	// short TCP connections per second (gvs-bench conn-rate, 16 at a time).
	TCP1CTGbps   float64 `json:"tcp1_ct_gbps"`
	ConnPerSecCT float64 `json:"conn_per_s_ct"`
	// ConnPerSecBare is the same generator between the two nodes'
	// namespaces on the underlay. On gvs and kernel nodes that is veths
	// and a bridge that no dataplane touches: the ceiling of the
	// connection rate on this machine. On OVS nodes eth0 is a port of
	// OVS's userspace bridge br-ul, so it goes through OVS again.
	ConnPerSecBare float64 `json:"conn_per_s_bare"`
	// TCP 1 stream in the networkpolicy mode with NetpolPolicies policies
	// (Config.NetworkPolicy; gvs only).
	TCP1NetpolGbps float64 `json:"tcp1_netpol_gbps"`
}

// Result is one dataplane's outcome.
type Result struct {
	Dataplane string `json:"dataplane"`
	Status    string `json:"status"`
	Error     string `json:"error,omitempty"`
	// Metrics are the medians over Runs.
	Metrics
	Runs []Metrics `json:"runs,omitempty"`
}

// Machine describes where the numbers were taken.
type Machine struct {
	CPUs   int    `json:"cpus"`
	Model  string `json:"model"`
	Kernel string `json:"kernel"`
}

// Report is the outcome of Run.
type Report struct {
	Time     time.Time     `json:"time"`
	Commit   string        `json:"commit,omitempty"`
	Machine  Machine       `json:"machine"`
	Runs     int           `json:"runs"`
	Duration time.Duration `json:"duration_ns"`
	Flows    int           `json:"udp_flows"`
	// BlastThreads is the frame blaster's sending threads.
	BlastThreads int `json:"blast_threads"`
	// GVSQueues and GVSVXLANReaders are gvs-switchd's queues and
	// vxlanReaders settings (Config).
	GVSQueues       int `json:"gvs_queues,omitempty"`
	GVSVXLANReaders int `json:"gvs_vxlan_readers,omitempty"`
	// GVSVXLANFlowQueues is gvs-switchd's vxlanFlowQueues (0: its default).
	GVSVXLANFlowQueues int `json:"gvs_vxlan_flow_queues,omitempty"`
	// GVSGoMaxProcs is gvs-switchd's goMaxProcs (0: its default).
	GVSGoMaxProcs int `json:"gvs_go_max_procs,omitempty"`
	// GVSIOEngine is gvs-switchd's ioEngine setting ("" is auto).
	GVSIOEngine string `json:"gvs_io_engine,omitempty"`
	// GVSSchedSlice and GVSSchedSliceWhen are gvs-switchd's schedSlice
	// and schedSliceWhen settings ("" is the default).
	GVSSchedSlice     string `json:"gvs_sched_slice,omitempty"`
	GVSSchedSliceWhen string `json:"gvs_sched_slice_when,omitempty"`
	// GVSBusyPoll is gvs-switchd's busyPoll setting ("" is the default).
	GVSBusyPoll string `json:"gvs_busy_poll,omitempty"`
	// NetpolPolicies is the policies of the networkpolicy row (0: not
	// run).
	NetpolPolicies int      `json:"netpol_policies,omitempty"`
	Dataplanes     []Result `json:"dataplanes"`
}

// Get returns the result of dataplane dp, or nil.
func (r *Report) Get(dp string) *Result {
	for i := range r.Dataplanes {
		if r.Dataplanes[i].Dataplane == dp {
			return &r.Dataplanes[i]
		}
	}
	return nil
}

func (c *Config) defaults() error {
	if len(c.Dataplanes) == 0 {
		c.Dataplanes = []string{cluster.DataplaneGVS, cluster.DataplaneKernel, cluster.DataplaneOVS, cluster.DataplaneFloor}
	}
	for i, dp := range c.Dataplanes {
		if slices.Contains(c.Dataplanes[:i], dp) {
			return fmt.Errorf("compare: dataplane %q twice", dp)
		}
		switch dp {
		case cluster.DataplaneGVS, cluster.DataplaneKernel, cluster.DataplaneOVS, cluster.DataplaneFloor:
		default:
			return fmt.Errorf("%w: %q", cluster.ErrUnknownDataplane, dp)
		}
	}
	if c.Runs <= 0 {
		c.Runs = 3
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = "gvc"
	}
	if len(c.Prefix) > 6 { // + letter + 5 digits: the lab's 12
		return fmt.Errorf("compare: prefix %q longer than 6 characters", c.Prefix)
	}
	if !c.Underlay.IsValid() {
		c.Underlay = netip.MustParsePrefix("192.168.247.0/24")
	}
	if c.Flows <= 0 {
		c.Flows = 64
	}
	if c.BlastThreads <= 0 {
		c.BlastThreads = 2
	}
	c.BlastThreads = min(c.BlastThreads, c.Flows)
	c.GVSQueues = max(c.GVSQueues, 1)
	if c.BinDir == "" {
		return errors.New("compare: Config.BinDir is required")
	}
	bins := []string{"gvs-switchd", "gvsctl", "gvs-bench"}
	c.NetworkPolicy = c.NetworkPolicy || c.NetworkPolicyOnly
	if c.NetpolPolicies <= 0 {
		c.NetpolPolicies = NetpolPolicies
	}
	if c.NetworkPolicy {
		bins = append(bins, "gvs-master")
	}
	return haveBins("compare", c.BinDir, bins...)
}

// haveBins reports an error naming cmd if dir lacks one of the binaries.
func haveBins(cmd, dir string, bins ...string) error {
	if dir == "" {
		return fmt.Errorf("%s: the binaries' directory is required", cmd)
	}
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return fmt.Errorf("%s: %w (run make build)", cmd, err)
		}
	}
	return nil
}

// Run measures every configured dataplane, each run on a fresh lab that
// it removes afterwards. The runs are interleaved — run 1 of every
// dataplane (and of the networkpolicy row), then run 2 of every one, … —
// so that a change in the machine's load falls on all of them alike, and
// each run starts with another dataplane (runOrder). A
// dataplane that is not installed or does not come up is reported with
// StatusMissing or StatusFailed (and not run again); the error returned is
// only for a bad Config or a cancelled ctx.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rep := &Report{Time: time.Now().UTC(), Machine: machine(), Runs: cfg.Runs, Duration: cfg.Duration, Flows: cfg.Flows, BlastThreads: cfg.BlastThreads,
		GVSQueues: cfg.GVSQueues, GVSVXLANReaders: cfg.GVSVXLANReaders, GVSVXLANFlowQueues: cfg.GVSVXLANFlowQueues, GVSGoMaxProcs: cfg.GVSGoMaxProcs, GVSIOEngine: cfg.GVSIOEngine, GVSSchedSlice: cfg.GVSSchedSlice, GVSSchedSliceWhen: cfg.GVSSchedSliceWhen,
		GVSBusyPoll: cfg.GVSBusyPoll}
	if cfg.NetworkPolicy {
		rep.NetpolPolicies = cfg.NetpolPolicies
	}
	p := &progress{w: cfg.Progress, start: time.Now()}
	for _, dp := range cfg.Dataplanes {
		res := Result{Dataplane: dp, Status: StatusOK}
		if dp == cluster.DataplaneOVS {
			if err := cluster.OVSAvailable(); err != nil {
				res.Status, res.Error = StatusMissing, err.Error()
				p.printf("%s: %s: %s", dp, res.Status, res.Error)
			}
		}
		rep.Dataplanes = append(rep.Dataplanes, res)
	}
	var netpol []float64
	for run := 1; run <= cfg.Runs; run++ {
		for _, i := range runOrder(len(rep.Dataplanes), run) {
			res := &rep.Dataplanes[i]
			if res.Status != StatusOK {
				continue
			}
			m, err := runOnce(ctx, cfg, res.Dataplane, run, p)
			if cerr := ctx.Err(); cerr != nil {
				return rep, cerr
			}
			if err != nil {
				res.Status, res.Error = StatusFailed, fmt.Sprintf("run %d: %v", run, err)
				p.printf("%s: %s: %s", res.Dataplane, res.Status, res.Error)
				continue
			}
			res.Runs = append(res.Runs, m)
		}
		if g := rep.ok(cluster.DataplaneGVS); cfg.NetworkPolicy && g != nil {
			v, err := runNetpol(ctx, cfg, run, p)
			if cerr := ctx.Err(); cerr != nil {
				return rep, cerr
			}
			if err != nil {
				g.Status, g.Error = StatusFailed, fmt.Sprintf("networkpolicy run %d: %v", run, err)
				p.printf("gvs: %s: %s", g.Status, g.Error)
				continue
			}
			netpol = append(netpol, v)
		}
	}
	for i := range rep.Dataplanes {
		res := &rep.Dataplanes[i]
		if res.Dataplane == cluster.DataplaneGVS {
			for k := range res.Runs {
				if k < len(netpol) {
					res.Runs[k].TCP1NetpolGbps = netpol[k]
				}
			}
		}
		if res.Status == StatusOK {
			res.Metrics = median(res.Runs)
		} else {
			res.Runs = nil
		}
	}
	return rep, nil
}

// runOrder is the order of the n dataplanes in run (from 1): the rows of
// a Williams square (0, 1, n-1, 2, n-2, … turned by one place each run), so
// that over n runs each dataplane comes first once and, for an even n,
// follows each other one once — rather than always after the same one,
// whose lab was torn down just before. Probes on the 2-vCPU VM
// (bench/results/2026-11-29-floorfix.md) had the dataplane that ran
// first in a round ahead on TCP 4 streams in 7 of 8 rounds, whichever
// it was.
func runOrder(n, run int) []int {
	order := make([]int, n)
	lo, hi := 1, n-1
	for k := 1; k < n; k++ { // order[0] = 0
		if k%2 == 1 {
			order[k], lo = lo, lo+1
		} else {
			order[k], hi = hi, hi-1
		}
	}
	for k := range order {
		order[k] = (order[k] + run - 1) % n
	}
	return order
}

// gvsSettings returns s with the gvs-switchd settings of c.
func (c Config) gvsSettings(s cluster.Spec) cluster.Spec {
	s.Queues, s.VXLANReaders, s.FlowQueues, s.GoMaxProcs = c.GVSQueues, c.GVSVXLANReaders, c.GVSVXLANFlowQueues, c.GVSGoMaxProcs
	s.IOEngine, s.SchedSlice, s.SchedSliceWhen = c.GVSIOEngine, c.GVSSchedSlice, c.GVSSchedSliceWhen
	s.BusyPoll = c.GVSBusyPoll
	return s
}

// runOnce brings up a cluster of dataplane dp, runs the workloads once on
// it and tears it down.
//
// A cluster of its own for each run: the send sockets' ports, and so which
// receive socket (flow queue) each flow hashes to, are drawn anew at each
// start, and a sparse flow that shares the bulk flow's socket waits behind
// it for as long as the cluster lives; one cluster for every run would let
// one draw set the median.
func runOnce(ctx context.Context, cfg Config, dp string, run int, p *progress) (Metrics, error) {
	prefix := fmt.Sprintf("%s%c%d", cfg.Prefix, dp[0], os.Getpid()%100000)
	p.printf("%s run %d/%d: bringing up 2 nodes × 2 pods", dp, run, cfg.Runs)
	uctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	c, err := cluster.Up(uctx, cfg.gvsSettings(cluster.Spec{
		Lab:        lab.Spec{Prefix: prefix, Nodes: 2, PodsPerNode: 2, Underlay: cfg.Underlay},
		Mode:       "subnet",
		BinDir:     cfg.BinDir,
		Dataplanes: []string{dp, dp},
	}))
	cancel()
	if err != nil {
		return Metrics{}, err
	}
	defer func() {
		if err := c.Down(); err != nil {
			p.printf("%s: tearing down: %v", dp, err)
		}
	}()
	e := &env{c: c, cfg: cfg, dp: dp, p: p}
	if err := e.warmUp(ctx); err != nil {
		return Metrics{}, err
	}
	return e.run(ctx, run)
}

// median returns the field-wise median of runs.
func median(runs []Metrics) Metrics {
	var out Metrics
	ov := reflect.ValueOf(&out).Elem()
	for f := range ov.NumField() {
		vals := make([]float64, len(runs))
		for i := range runs {
			vals[i] = reflect.ValueOf(runs[i]).Field(f).Float()
		}
		ov.Field(f).SetFloat(medianOf(vals))
	}
	return out
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// machine describes this machine.
func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// progress writes timestamped progress lines.
type progress struct {
	w     io.Writer
	start time.Time
}

func (p *progress) printf(format string, args ...any) {
	if p.w == nil {
		return
	}
	fmt.Fprintf(p.w, "[%4.0fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}
