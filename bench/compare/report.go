package compare

import (
	"fmt"
	"html"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// row is one line of the table and, if panel, one panel of the chart.
type row struct {
	name  string
	get   func(Metrics) float64
	lower bool // lower is better
	// target is the bar for gvs (docs/targets.md; checked by CheckTargets), as
	// text.
	target string
	panel  bool
}

var rows = []row{
	{"TCP 1 stream, Gbit/s", func(m Metrics) float64 { return m.TCP1Gbps }, false, "≥0.9× floor, ≥6× ovs", true},
	{"TCP 4 streams, Gbit/s", func(m Metrics) float64 { return m.TCP4Gbps }, false, "≥0.9× floor, ≥6× ovs", true},
	{"UDP 64 B socket, delivered kpps", func(m Metrics) float64 { return m.UDP64Kpps }, false, "", true},
	{"UDP 64 B socket, loss %", func(m Metrics) float64 { return 100 * m.UDP64Loss }, true, "", false},
	{"UDP 1400 B socket, delivered kpps", func(m Metrics) float64 { return m.UDP1400Kpps }, false, "", true},
	{"UDP 1400 B socket, loss %", func(m Metrics) float64 { return 100 * m.UDP1400Loss }, true, "", false},
	{"UDP 1400 B GSO sender, delivered kpps", func(m Metrics) float64 { return m.UDP1400GSOKpps }, false, "≥0.9× floor", true},
	{"UDP 1400 B GSO sender, loss %", func(m Metrics) float64 { return 100 * m.UDP1400GSOLoss }, true, "", false},
	{"UDP 64 B blast, delivered kpps", func(m Metrics) float64 { return m.UDP64BlastKpps }, false, "", true},
	{"UDP 64 B blast, offered kpps", func(m Metrics) float64 { return m.UDP64BlastOfferedKpps }, false, "", false},
	{"UDP 64 B blast, loss %", func(m Metrics) float64 { return 100 * m.UDP64BlastLoss }, true, "", false},
	{"UDP 64 B blast, ≤0.5 % loss, kpps", func(m Metrics) float64 { return m.UDP64NoDropKpps }, false, "≥0.9× floor, ≥4× ovs", true},
	{"UDP 1400 B blast, delivered kpps", func(m Metrics) float64 { return m.UDP1400BlastKpps }, false, "", true},
	{"UDP 1400 B blast, offered kpps", func(m Metrics) float64 { return m.UDP1400BlastOfferedKpps }, false, "", false},
	{"UDP 1400 B blast, loss %", func(m Metrics) float64 { return 100 * m.UDP1400BlastLoss }, true, "", false},
	{"UDP 1400 B blast, ≤0.5 % loss, kpps", func(m Metrics) float64 { return m.UDP1400NoDropKpps }, false, "", true},
	{"UDP 64 B at a fixed rate, dataplane CPU µs per frame", func(m Metrics) float64 { return m.UDP64CPUus }, true, "", false},
	{"UDP 1400 B at a fixed rate, dataplane CPU µs per frame", func(m Metrics) float64 { return m.UDP1400CPUus }, true, "", false},
	{"UDP 64 B blast, ≤0.5 % loss, node to node on the underlay, kpps", func(m Metrics) float64 { return m.UDP64NoDropBareKpps }, false, "", true},
	{"RTT UDP probe idle p50, µs", func(m Metrics) float64 { return m.RTTIdleP50us }, true, "≤1.2× floor", true},
	{"RTT UDP probe idle p99, µs", func(m Metrics) float64 { return m.RTTIdleP99us }, true, "", true},
	{"RTT ping idle p50, µs", func(m Metrics) float64 { return m.RTTPingIdleP50us }, true, "", true},
	{"RTT ping idle p99, µs", func(m Metrics) float64 { return m.RTTPingIdleP99us }, true, "", true},
	{"RTT ping sparse (200 ms) p50, µs", func(m Metrics) float64 { return m.RTTPingSparseP50us }, true, "", true},
	{"RTT ping sparse (200 ms) p99, µs", func(m Metrics) float64 { return m.RTTPingSparseP99us }, true, "", true},
	{"RTT UDP probe under load p50, µs", func(m Metrics) float64 { return m.RTTLoadP50us }, true, "", true},
	{"RTT UDP probe under load p99, µs", func(m Metrics) float64 { return m.RTTLoadP99us }, true, "≤0.5× ovs", true},
	{"RTT ping under load p50, µs", func(m Metrics) float64 { return m.RTTPingLoadP50us }, true, "", true},
	{"RTT ping under load p99, µs", func(m Metrics) float64 { return m.RTTPingLoadP99us }, true, "", true},
	{"CPU s per Gbit (machine)", func(m Metrics) float64 { return m.CPUSecPerGbit }, true, "≤1.15× floor", false},
	{"CPU s per Gbit (dataplane procs)", func(m Metrics) float64 { return m.DataplaneCPUSecPerGbit }, true, "", false},
	{"TCP 1 stream, stateful rules, Gbit/s", func(m Metrics) float64 { return m.TCP1CTGbps }, false, "≥0.9× gvs without", true},
	{"new TCP connections/s, stateful rules", func(m Metrics) float64 { return m.ConnPerSecCT }, false, "≥0.9× kernel, ≥0.8× floor", true},
	{"new TCP connections/s, node to node on the underlay", func(m Metrics) float64 { return m.ConnPerSecBare }, false, "", true},
	{"TCP 1 stream, networkpolicy mode, N policies, Gbit/s", func(m Metrics) float64 { return m.TCP1NetpolGbps }, false, "≥0.9× gvs subnet", true},
}

// WriteTable writes the medians of every dataplane, and the ratios of gvs
// to the floor, to the kernel and to OVS, as an aligned text table. Missing or failed
// dataplanes appear as such, with their reason below the table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"metric"}
	for _, d := range r.Dataplanes {
		head = append(head, d.Dataplane)
	}
	g, k, o, f := r.ok("gvs"), r.ok("kernel"), r.ok("ovs"), r.ok("floor")
	if g != nil && f != nil {
		head = append(head, "gvs/floor")
	}
	if g != nil && k != nil {
		head = append(head, "gvs/kernel")
	}
	if g != nil && o != nil {
		head = append(head, "gvs/ovs")
	}
	head = append(head, "target")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, rw := range rows {
		if r.empty(rw) {
			continue
		}
		cells := []string{rw.name}
		for _, d := range r.Dataplanes {
			if d.Status != StatusOK {
				cells = append(cells, d.Status)
			} else {
				cells = append(cells, num(rw.get(d.Metrics)))
			}
		}
		if g != nil && f != nil {
			cells = append(cells, ratio(rw.get(g.Metrics), rw.get(f.Metrics)))
		}
		if g != nil && k != nil {
			cells = append(cells, ratio(rw.get(g.Metrics), rw.get(k.Metrics)))
		}
		if g != nil && o != nil {
			cells = append(cells, ratio(rw.get(g.Metrics), rw.get(o.Metrics)))
		}
		cells = append(cells, rw.target)
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, d := range r.Dataplanes {
		if d.Status != StatusOK {
			fmt.Fprintf(w, "%s %s: %s\n", d.Dataplane, d.Status, d.Error)
		}
	}
	if g != nil && g.TCP1NetpolGbps > 0 {
		fmt.Fprintf(w, "gvs TCP 1 stream in the networkpolicy mode with N=%d policies ÷ the subnet mode: %s (target ≥0.9× with 100)\n", r.NetpolPolicies, ratio(g.TCP1NetpolGbps, g.TCP1Gbps))
	}
	if g != nil && g.TCP1CTGbps > 0 {
		fmt.Fprintf(w, "gvs TCP 1 stream with the stateful rules ÷ without: %s (target ≥0.9×)\n", ratio(g.TCP1CTGbps, g.TCP1Gbps))
	}
	readers := r.GVSVXLANReaders
	if readers == 0 {
		readers = max(r.GVSQueues, 1)
	}
	engine := r.GVSIOEngine
	if engine == "" {
		engine = "auto"
	}
	slice := r.GVSSchedSlice
	if slice == "" {
		slice = "default"
	}
	if r.GVSSchedSliceWhen != "" {
		slice += " " + r.GVSSchedSliceWhen
	}
	busy := r.GVSBusyPoll
	if busy == "" {
		busy = "default"
	}
	flowQueues := "default"
	if r.GVSVXLANFlowQueues > 0 {
		flowQueues = strconv.Itoa(r.GVSVXLANFlowQueues)
	}
	procs := "default"
	if r.GVSGoMaxProcs > 0 {
		procs = strconv.Itoa(r.GVSGoMaxProcs)
	}
	_, err := fmt.Fprintf(w, "medians of %d runs, %s per workload, %d UDP flows, %d blaster thread(s), gvs queues %d (vxlan0 readers %d, flow queues %s), gvs ioEngine %s, schedSlice %s, busyPoll %s, goMaxProcs %s; %d CPUs, %s, kernel %s\n",
		r.Runs, r.Duration, r.Flows, max(r.BlastThreads, 1), max(r.GVSQueues, 1), readers, flowQueues, engine, slice, busy, procs, r.Machine.CPUs, r.Machine.Model, r.Machine.Kernel)
	return err
}

// empty reports whether no dataplane has a value for rw (a workload
// that did not run, such as the conntrack rows without Config.Conntrack,
// or everything else with ConntrackOnly).
func (r *Report) empty(rw row) bool {
	for _, d := range r.Dataplanes {
		if d.Status == StatusOK && rw.get(d.Metrics) != 0 {
			return false
		}
	}
	return true
}

func (r *Report) ok(dp string) *Result {
	if d := r.Get(dp); d != nil && d.Status == StatusOK {
		return d
	}
	return nil
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 0.01:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// colors of the dataplanes in the chart.
var colors = map[string]string{"gvs": "#1f77b4", "kernel": "#7f7f7f", "ovs": "#ff7f0e", "floor": "#2ca02c"}

// WriteSVG writes a bar chart, one panel per headline metric (the rows
// marked panel), one bar per dataplane, with its value; missing dataplanes
// are labelled, never drawn.
func (r *Report) WriteSVG(w io.Writer) error {
	const (
		cols, pw, ph = 4, 240, 200
		top          = 50
	)
	var panels []int
	for i, rw := range rows {
		if rw.panel && !r.empty(rw) {
			panels = append(panels, i)
		}
	}
	nrows := (len(panels) + cols - 1) / cols
	W, H := cols*pw, top+nrows*ph+30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15" font-weight="bold">gvs-bench compare — medians of %d runs (%s each)</text>`+"\n", r.Runs, r.Duration)
	lx := 10
	for _, d := range r.Dataplanes {
		label := d.Dataplane
		if d.Status != StatusOK {
			label += " (" + d.Status + ")"
		}
		fmt.Fprintf(&b, `<rect x="%d" y="30" width="10" height="10" fill="%s"/><text x="%d" y="39">%s</text>`+"\n", lx, color(d.Dataplane), lx+14, html.EscapeString(label))
		lx += 20 + 7*len(label)
	}
	for i, ri := range panels {
		rw := rows[ri]
		x0, y0 := (i%cols)*pw, top+(i/cols)*ph
		hint := "higher is better"
		if rw.lower {
			hint = "lower is better"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0+10, y0+15, html.EscapeString(rw.name))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#666">%s</text>`+"\n", x0+10, y0+28, hint)
		maxv := 0.0
		for _, d := range r.Dataplanes {
			if d.Status == StatusOK {
				maxv = max(maxv, rw.get(d.Metrics))
			}
		}
		base, area := y0+ph-25, ph-70
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0+10, base, x0+pw-20, base)
		bw := (pw - 40) / max(len(r.Dataplanes), 1)
		for j, d := range r.Dataplanes {
			bx := x0 + 15 + j*bw
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", bx+bw/2-5, base+13, d.Dataplane)
			if d.Status != StatusOK {
				fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#999">%s</text>`+"\n", bx+bw/2-5, base-5, d.Status)
				continue
			}
			v := rw.get(d.Metrics)
			h := 0
			if maxv > 0 {
				h = int(float64(area) * v / maxv)
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", bx, base-h, bw-10, h, color(d.Dataplane))
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", bx+bw/2-5, base-h-3, num(v))
		}
	}
	fmt.Fprintf(&b, `<text x="10" y="%d" fill="#666">%d CPUs, %s, kernel %s</text>`+"\n", H-10, r.Machine.CPUs, html.EscapeString(r.Machine.Model), html.EscapeString(r.Machine.Kernel))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func color(dp string) string {
	if c, ok := colors[dp]; ok {
		return c
	}
	return "#2ca02c"
}
