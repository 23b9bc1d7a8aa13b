package compare

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Target is one of gvs's bars in docs/targets.md that a compare report can check:
// gvs's value over a reference dataplane's, at least (or, Lower, at most)
// Bound.
type Target struct {
	Name string
	// Ref is the reference dataplane: "floor", "kernel", "ovs", or "gvs"
	// itself for a bar against another of gvs's own rows (refGet).
	Ref   string
	Bound float64
	// Lower: the ratio must be ≤ Bound (latency, CPU), else ≥ Bound.
	Lower bool
	// EveryRun: the bar holds in every run, run i of gvs against run i of
	// Ref (Run interleaves them, so they shared the machine's load), and
	// the worst run's ratio is the one reported; otherwise it is the
	// ratio of the medians.
	EveryRun bool
	get      func(Metrics) float64
	// refGet reads the reference's row when it is not the same as gvs's
	// (nil: get): gvs's TCP through the stateful rules against its TCP
	// without them; refName names that row in WriteTargets' table.
	refGet  func(Metrics) float64
	refName string
}

// ref reads the reference's value of t from m.
func (t Target) ref(m Metrics) float64 {
	if t.refGet != nil {
		return t.refGet(m)
	}
	return t.get(m)
}

// Targets are the bars of docs/targets.md on the rows of a compare report.
var Targets = []Target{
	{Name: "TCP 1 stream", Ref: "floor", Bound: 0.9, get: func(m Metrics) float64 { return m.TCP1Gbps }},
	{Name: "TCP 4 streams", Ref: "floor", Bound: 0.9, get: func(m Metrics) float64 { return m.TCP4Gbps }},
	{Name: "UDP 64 B no-loss rate", Ref: "floor", Bound: 0.9, get: func(m Metrics) float64 { return m.UDP64NoDropKpps }},
	{Name: "UDP 1400 B GSO rate", Ref: "floor", Bound: 0.9, get: func(m Metrics) float64 { return m.UDP1400GSOKpps }},
	{Name: "CPU s per Gbit (machine)", Ref: "floor", Bound: 1.15, Lower: true, get: func(m Metrics) float64 { return m.CPUSecPerGbit }},
	{Name: "idle UDP-probe RTT p50", Ref: "floor", Bound: 1.2, Lower: true, get: func(m Metrics) float64 { return m.RTTIdleP50us }},
	{Name: "TCP 1 stream", Ref: "ovs", Bound: 6, EveryRun: true, get: func(m Metrics) float64 { return m.TCP1Gbps }},
	{Name: "TCP 4 streams", Ref: "ovs", Bound: 6, EveryRun: true, get: func(m Metrics) float64 { return m.TCP4Gbps }},
	{Name: "UDP 64 B no-loss rate", Ref: "ovs", Bound: 4, EveryRun: true, get: func(m Metrics) float64 { return m.UDP64NoDropKpps }},
	{Name: "UDP-probe RTT p99 under 1 TCP stream", Ref: "ovs", Bound: 0.5, Lower: true, EveryRun: true, get: func(m Metrics) float64 { return m.RTTLoadP99us }},
	// The connection-tracking rows (compare -conntrack): the kernel runs
	// them through its nftables conntrack rule, the floor without rules
	// (it has none), so ConnPerSecCT is each one's rate on the same
	// generator in the same run.
	{Name: "new TCP connections/s, stateful rules", Ref: "kernel", Bound: 0.9, get: func(m Metrics) float64 { return m.ConnPerSecCT }},
	{Name: "new TCP connections/s, stateful rules", Ref: "floor", Bound: 0.8, get: func(m Metrics) float64 { return m.ConnPerSecCT }},
	{Name: "TCP 1 stream, stateful rules", Ref: "gvs", Bound: 0.9, get: func(m Metrics) float64 { return m.TCP1CTGbps },
		refGet: func(m Metrics) float64 { return m.TCP1Gbps }, refName: "TCP 1 stream without rules"},
}

// Verdicts of a TargetResult.
const (
	Met    = "met"
	Missed = "missed"
	NA     = "n/a" // not measured: see TargetResult.Why
)

// TargetResult is a Target checked on one report.
type TargetResult struct {
	Target
	// Ratio is gvs ÷ Ref: of the medians, or of the worst run
	// (Target.EveryRun), 0 when not measured.
	Ratio float64
	// Runs are the per-run ratios of an EveryRun target.
	Runs    []float64
	Verdict string
	// Why a target is NA: the dataplane or the row missing.
	Why string
	// Floor is the same bar with the floor's rows in place of gvs's, for
	// the targets against OVS and the kernel: whether the limit of the
	// TAP design reached it in this run. A target the floor misses too is
	// out of reach of any TAP-and-UDP dataplane on that run's machine.
	// Nil for the targets against the floor or against gvs's own rows,
	// and when the report has no floor.
	Floor *TargetResult
}

// CheckTargets checks every Target on r.
func CheckTargets(r *Report) []TargetResult {
	out := make([]TargetResult, 0, len(Targets))
	for _, t := range Targets {
		out = append(out, t.check(r))
	}
	return out
}

func (t Target) check(r *Report) TargetResult {
	res := t.checkOn(r, "gvs")
	if t.Ref != "floor" && t.refGet == nil && r.ok("floor") != nil {
		fl := t.checkOn(r, "floor")
		res.Floor = &fl
	}
	return res
}

// checkOn checks t with dataplane subject's rows in place of gvs's.
func (t Target) checkOn(r *Report, subject string) TargetResult {
	res := TargetResult{Target: t, Verdict: NA}
	g, ref := r.ok(subject), r.ok(t.Ref)
	switch {
	case g == nil:
		res.Why = "no " + subject + " result"
		return res
	case ref == nil:
		res.Why = "no " + t.Ref + " result"
		return res
	}
	ok := func(q float64) bool {
		if t.Lower {
			return q <= t.Bound
		}
		return q >= t.Bound
	}
	if !t.EveryRun {
		a, b := t.get(g.Metrics), t.ref(ref.Metrics)
		if a == 0 || b == 0 {
			res.Why = "row not measured"
			return res
		}
		res.Ratio, res.Verdict = a/b, Missed
		if ok(res.Ratio) {
			res.Verdict = Met
		}
		return res
	}
	n := min(len(g.Runs), len(ref.Runs))
	if n == 0 {
		res.Why = "no runs in the report"
		return res
	}
	res.Verdict = Met
	for i := range n {
		a, b := t.get(g.Runs[i]), t.ref(ref.Runs[i])
		if a == 0 || b == 0 {
			res.Verdict, res.Why, res.Runs = NA, fmt.Sprintf("row not measured in run %d", i+1), nil
			return res
		}
		q := a / b
		res.Runs = append(res.Runs, q)
		if i == 0 || (t.Lower && q > res.Ratio) || (!t.Lower && q < res.Ratio) {
			res.Ratio = q
		}
		if !ok(q) {
			res.Verdict = Missed
		}
	}
	return res
}

// WriteTargets writes results as an aligned table: the target, gvs's
// ratio and whether it is met, and for the targets against OVS and the
// kernel the floor's ratio and verdict on the same bar.
func WriteTargets(w io.Writer, results []TargetResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tgvs ratio\tverdict\tfloor on the same bar\t")
	met, na, beyond := 0, 0, 0
	for _, r := range results {
		op := "≥"
		if r.Lower {
			op = "≤"
		}
		ref := r.Ref
		if r.refName != "" {
			ref += " " + r.refName
		}
		name := fmt.Sprintf("%s %s %g× %s", r.Name, op, r.Bound, ref)
		if r.EveryRun {
			name += ", every run"
		}
		ratio, verdict := r.ratioText()
		floor := "–"
		if r.Floor != nil {
			fr, fv := r.Floor.ratioText()
			floor = fr + " " + fv
			if r.Verdict == Missed && r.Floor.Verdict == Missed {
				beyond++
			}
		}
		switch r.Verdict {
		case Met:
			met++
		case NA:
			na++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", name, ratio, verdict, floor)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	summary := fmt.Sprintf("%d of %d targets met", met, len(results))
	if na > 0 {
		summary += fmt.Sprintf(", %d not measured", na)
	}
	if beyond > 0 {
		summary += fmt.Sprintf("; the floor missed %d of the missed ones too", beyond)
	}
	_, err := fmt.Fprintln(w, summary)
	return err
}

// ratioText is r's ratio (with the per-run ratios of an EveryRun target)
// and its verdict as WriteTargets prints them.
func (r TargetResult) ratioText() (ratio, verdict string) {
	if r.Verdict == NA {
		return "–", r.Verdict + " (" + r.Why + ")"
	}
	ratio = fmt.Sprintf("%.2f×", r.Ratio)
	if len(r.Runs) > 0 {
		runs := make([]string, len(r.Runs))
		for i, q := range r.Runs {
			runs[i] = fmt.Sprintf("%.2f", q)
		}
		ratio += " (runs " + strings.Join(runs, ", ") + ")"
	}
	return ratio, r.Verdict
}
