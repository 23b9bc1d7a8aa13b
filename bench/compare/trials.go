package compare

// Trials: an A/B of gvs-switchd settings on the rows that compare's few
// runs cannot resolve on a small, shared machine (the round trips, TCP
// alone).
//
//  1. Each trial brings up a fresh two-node gvs cluster per setting, the
//     settings in a rotating order (trial k starts with setting k mod n),
//     so that a drift of the machine's load spreads over all of them.
//  2. In each cluster: UDP probes between pod pair 1 on an idle path;
//     then one TCP stream on pod pair 0 with probes on pair 1 beside it;
//     then the TCP stream alone, with the CPU time it took (machine and
//     gvs-switchd) per Gbit.
//  3. The report has every trial's numbers, each setting's medians, and
//     for every setting after the first how many trials it beat the
//     first in (the same trial's clusters are neighbours in time).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// Setting is one side of a trials A/B: a name and gvs-switchd settings,
// as a JSON object of its configuration's fields (docs/operations.md),
// applied over the cluster's own on every node.
type Setting struct {
	Name   string          `json:"name"`
	Daemon json.RawMessage `json:"daemon,omitempty"`
}

// ParseSetting parses NAME=JSON, such as off={"busyPoll":"0"}; a bare NAME
// is gvs-switchd's defaults. A field gvs-switchd does not have is refused.
func ParseSetting(s string) (Setting, error) {
	name, js, _ := strings.Cut(s, "=")
	if name == "" || strings.ContainsAny(name, " \t") {
		return Setting{}, fmt.Errorf("setting %q: want NAME or NAME={json of gvs-switchd settings}", s)
	}
	st := Setting{Name: name}
	if js != "" {
		st.Daemon = json.RawMessage(js)
		var cfg daemon.Config
		if err := st.apply(&cfg); err != nil {
			return Setting{}, fmt.Errorf("setting %q: %w", name, err)
		}
	}
	return st, nil
}

// apply sets s's fields in cfg.
func (s Setting) apply(cfg *daemon.Config) error {
	if len(s.Daemon) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(s.Daemon))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// TrialsConfig configures RunTrials.
type TrialsConfig struct {
	// BinDir holds gvs-switchd, gvsctl and gvs-bench.
	BinDir string
	// Settings are compared, at least two; the first is the baseline of
	// the "better in" counts.
	Settings []Setting
	// Trials is how many clusters of each setting (default 10).
	Trials int
	// Duration is each workload's (default 4 s).
	Duration time.Duration
	// Prefix names the namespaces (default "gtr", at most 6 characters).
	Prefix string
	// Underlay is the nodes' underlay network (default 192.168.249.0/24).
	Underlay netip.Prefix
	// Progress receives a line per trial (nil: none).
	Progress io.Writer
}

// Trial is what one cluster of one setting measured.
type Trial struct {
	TCP1Gbps   float64 `json:"tcp1_gbps"`
	IdleP50us  float64 `json:"rtt_idle_p50_us"`
	IdleP99us  float64 `json:"rtt_idle_p99_us"`
	LoadP50us  float64 `json:"rtt_load_p50_us"`
	LoadP90us  float64 `json:"rtt_load_p90_us"`
	LoadP99us  float64 `json:"rtt_load_p99_us"`
	LoadTCPbps float64 `json:"tcp1_load_gbps"`
	// CPUSecPerGbit and DataplaneCPUSecPerGbit are Metrics' fields of the
	// same names, for the TCP stream alone.
	CPUSecPerGbit          float64 `json:"cpu_s_per_gbit"`
	DataplaneCPUSecPerGbit float64 `json:"dataplane_cpu_s_per_gbit"`
}

// SettingResult is one setting's trials.
type SettingResult struct {
	Setting
	Trials []Trial `json:"trials"`
}

// TrialsReport is RunTrials' result.
type TrialsReport struct {
	Time     time.Time       `json:"time"`
	Machine  Machine         `json:"machine"`
	Commit   string          `json:"commit,omitempty"`
	Duration time.Duration   `json:"duration_ns"`
	Settings []SettingResult `json:"settings"`
}

func (c *TrialsConfig) defaults() error {
	if len(c.Settings) < 2 {
		return errors.New("trials: want at least two settings")
	}
	seen := map[string]bool{}
	for _, s := range c.Settings {
		if seen[s.Name] {
			return fmt.Errorf("trials: setting %q twice", s.Name)
		}
		seen[s.Name] = true
	}
	if c.Trials <= 0 {
		c.Trials = 10
	}
	if c.Duration <= 0 {
		c.Duration = 4 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = "gtr"
	}
	if len(c.Prefix) > 6 {
		return fmt.Errorf("trials: prefix %q longer than 6 characters", c.Prefix)
	}
	if !c.Underlay.IsValid() {
		c.Underlay = netip.MustParsePrefix("192.168.249.0/24")
	}
	return haveBins("trials", c.BinDir, "gvs-switchd", "gvsctl", "gvs-bench")
}

// order returns the settings' indexes in trial k's order.
func order(k, n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = (k + i) % n
	}
	return o
}

// RunTrials runs cfg.Trials trials of every setting (see the file's
// overview). It stops at the first failure, returning what it measured
// so far with the error.
func RunTrials(ctx context.Context, cfg TrialsConfig) (*TrialsReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rep := &TrialsReport{Time: time.Now().UTC(), Machine: machine(), Duration: cfg.Duration}
	for _, s := range cfg.Settings {
		rep.Settings = append(rep.Settings, SettingResult{Setting: s})
	}
	p := &progress{w: cfg.Progress, start: time.Now()}
	for k := range cfg.Trials {
		for _, i := range order(k, len(cfg.Settings)) {
			s := &rep.Settings[i]
			tr, err := runTrial(ctx, cfg, s.Setting, k)
			if err != nil {
				return rep, fmt.Errorf("trial %d, %s: %w", k+1, s.Name, err)
			}
			s.Trials = append(s.Trials, tr)
			p.printf("trial %d/%d %s: TCP %.2f Gbit/s; probe idle p50 %.0f µs; under load p50 %.0f p99 %.0f µs",
				k+1, cfg.Trials, s.Name, tr.TCP1Gbps, tr.IdleP50us, tr.LoadP50us, tr.LoadP99us)
		}
	}
	return rep, nil
}

// runTrial measures setting s in a cluster of its own.
func runTrial(ctx context.Context, cfg TrialsConfig, s Setting, k int) (Trial, error) {
	var tr Trial
	var applyErr error
	uctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	c, err := cluster.Up(uctx, cluster.Spec{
		Lab:        lab.Spec{Prefix: fmt.Sprintf("%s%d", cfg.Prefix, k%1000), Nodes: 2, PodsPerNode: 2, Underlay: cfg.Underlay},
		Mode:       "subnet",
		BinDir:     cfg.BinDir,
		Dataplanes: []string{cluster.DataplaneGVS, cluster.DataplaneGVS},
		Configure: func(_ *cluster.Cluster, _ int, dc *daemon.Config) {
			if err := s.apply(dc); err != nil {
				applyErr = err
			}
		},
	})
	cancel()
	if err == nil {
		err = applyErr
	}
	if err != nil {
		if c != nil {
			_ = c.Down()
		}
		return tr, err
	}
	defer func() { _ = c.Down() }()
	e := &env{c: c, cfg: Config{BinDir: cfg.BinDir, Duration: cfg.Duration}, dp: cluster.DataplaneGVS, p: &progress{}}
	if err := e.warmUp(ctx); err != nil {
		return tr, err
	}
	src, dst := e.pods(0)
	psrc, pdst := e.pods(1)
	idle, err := e.probe(ctx, psrc, pdst)
	if err != nil {
		return tr, err
	}
	tr.IdleP50us, tr.IdleP99us = idle.P50us, idle.P99us
	var wg sync.WaitGroup
	var tcpErr error
	wg.Go(func() { tr.LoadTCPbps, tcpErr = e.tcp(ctx, src, dst, 1, cfg.Duration+time.Second) })
	time.Sleep(500 * time.Millisecond)
	load, err := e.probe(ctx, psrc, pdst)
	wg.Wait()
	if err = errors.Join(err, tcpErr); err != nil {
		return tr, err
	}
	tr.LoadP50us, tr.LoadP90us, tr.LoadP99us = load.P50us, load.P90us, load.P99us
	before := e.cpu()
	tr.TCP1Gbps, err = e.tcp(ctx, src, dst, 1, cfg.Duration)
	after := e.cpu()
	if gbit := tr.TCP1Gbps * cfg.Duration.Seconds(); gbit > 0 {
		tr.CPUSecPerGbit = (after.busy - before.busy) / gbit
		tr.DataplaneCPUSecPerGbit = (after.dataplane - before.dataplane) / gbit
	}
	return tr, err
}

// trialRows are the rows of the trials table.
var trialRows = []struct {
	name  string
	get   func(Trial) float64
	lower bool
}{
	{"TCP 1 stream alone, Gbit/s", func(t Trial) float64 { return t.TCP1Gbps }, false},
	{"RTT UDP probe idle p50, µs", func(t Trial) float64 { return t.IdleP50us }, true},
	{"RTT UDP probe idle p99, µs", func(t Trial) float64 { return t.IdleP99us }, true},
	{"RTT UDP probe under TCP load p50, µs", func(t Trial) float64 { return t.LoadP50us }, true},
	{"RTT UDP probe under TCP load p90, µs", func(t Trial) float64 { return t.LoadP90us }, true},
	{"RTT UDP probe under TCP load p99, µs", func(t Trial) float64 { return t.LoadP99us }, true},
	{"TCP 1 stream beside the probes, Gbit/s", func(t Trial) float64 { return t.LoadTCPbps }, false},
	{"CPU s per Gbit of TCP alone (machine)", func(t Trial) float64 { return t.CPUSecPerGbit }, true},
	{"CPU s per Gbit of TCP alone (gvs-switchd)", func(t Trial) float64 { return t.DataplaneCPUSecPerGbit }, true},
}

// better counts the trials in which b beats a on get (lower or higher is
// better), trial by trial, and how many trials both have.
func better(a, b []Trial, get func(Trial) float64, lower bool) (wins, n int) {
	n = min(len(a), len(b))
	for i := range n {
		x, y := get(a[i]), get(b[i])
		if (lower && y < x) || (!lower && y > x) {
			wins++
		}
	}
	return wins, n
}

// WriteTable writes each setting's medians and, for the settings after
// the first, in how many trials they did better than the first.
func (r *TrialsReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{""}
	for i, s := range r.Settings {
		head = append(head, s.Name)
		if i > 0 {
			head = append(head, "better than "+r.Settings[0].Name)
		}
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, row := range trialRows {
		cells := []string{row.name}
		for i, s := range r.Settings {
			v := make([]float64, len(s.Trials))
			for k, t := range s.Trials {
				v[k] = row.get(t)
			}
			cells = append(cells, num(medianOf(v)))
			if i > 0 {
				wins, n := better(r.Settings[0].Trials, s.Trials, row.get, row.lower)
				cells = append(cells, fmt.Sprintf("%d of %d", wins, n))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	n := 0
	if len(r.Settings) > 0 {
		n = len(r.Settings[0].Trials)
	}
	var names []string
	for _, s := range r.Settings {
		d := "gvs-switchd defaults"
		if len(s.Daemon) > 0 {
			d = string(s.Daemon)
		}
		names = append(names, s.Name+": "+d)
	}
	_, err := fmt.Fprintf(w, "medians of %d trials, %s per workload, a fresh cluster per trial and setting; %s; %d CPUs, %s, kernel %s\n",
		n, r.Duration, strings.Join(names, "; "), r.Machine.CPUs, r.Machine.Model, r.Machine.Kernel)
	return err
}
