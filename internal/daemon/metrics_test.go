package daemon

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/tap/uring"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// idlePort is a switch port that never delivers a frame.
type idlePort struct{ closed chan struct{} }

func (p *idlePort) Name() string                                        { return "idle0" }
func (p *idlePort) Caps() port.Caps                                     { return port.Caps{} }
func (p *idlePort) BatchSize() int                                      { return 4 }
func (p *idlePort) Write(b [][]byte, _ []port.Meta, _ int) (int, error) { return len(b), nil }
func (p *idlePort) Read([][]byte, []port.Meta, int) (int, error) {
	<-p.closed
	return 0, errors.New("closed")
}
func (p *idlePort) Close() error { close(p.closed); return nil }

// scrape gathers the daemon's registry into families by name.
func scrape(t *testing.T, d *Daemon) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := d.registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// cniCount returns the histogram's sample count for verb and result.
func cniCount(fams map[string]*dto.MetricFamily, verb, result string) uint64 {
	f := fams["gvs_cni_request_duration_seconds"]
	if f == nil {
		return 0
	}
	for _, m := range f.GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		if l["verb"] == verb && l["result"] == result {
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func TestMetricsFamilies(t *testing.T) {
	d := newTestDaemon(t)
	if err := d.dp.sw.AddPort(3, &idlePort{closed: make(chan struct{})}); err != nil {
		t.Fatal(err)
	}
	before := scrape(t, d)
	if n := cniCount(before, "ADD", "success"); n != 0 {
		t.Fatalf("CNI ADD count %d before any request", n)
	}
	d.cniMetrics.observe("ADD", 4*time.Millisecond, nil)
	d.cniMetrics.observe("ADD", 30*time.Millisecond, errors.New("no namespace"))
	d.cniMetrics.observe("BOGUS", time.Millisecond, nil)
	c, err := d.dp.sw.StartCapture(3, vswitch.CaptureConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()

	fams := scrape(t, d)
	for name, typ := range map[string]dto.MetricType{
		"gvs_port_rx_packets_total": dto.MetricType_COUNTER, "gvs_port_rx_bytes_total": dto.MetricType_COUNTER,
		"gvs_port_tx_packets_total": dto.MetricType_COUNTER, "gvs_port_tx_bytes_total": dto.MetricType_COUNTER,
		"gvs_port_rx_drops_total": dto.MetricType_COUNTER, "gvs_port_tx_drops_total": dto.MetricType_COUNTER,
		"gvs_drops_total": dto.MetricType_COUNTER, "gvs_flow_rules": dto.MetricType_GAUGE,
		"gvs_flow_lookups_total": dto.MetricType_COUNTER, "gvs_flow_cache_hits_total": dto.MetricType_COUNTER,
		"gvs_flow_cache_misses_total": dto.MetricType_COUNTER, "gvs_tunnel_peers": dto.MetricType_GAUGE,
		"gvs_pods": dto.MetricType_GAUGE, "gvs_build_info": dto.MetricType_GAUGE,
		"gvs_cni_request_duration_seconds": dto.MetricType_HISTOGRAM,
		"gvs_capture_frames_total":         dto.MetricType_COUNTER, "gvs_capture_dropped_frames_total": dto.MetricType_COUNTER,
		"gvs_captures_active":   dto.MetricType_GAUGE,
		"gvs_conntrack_entries": dto.MetricType_GAUGE, "gvs_conntrack_entries_limit": dto.MetricType_GAUGE,
		"gvs_conntrack_created_total": dto.MetricType_COUNTER, "gvs_conntrack_expired_total": dto.MetricType_COUNTER,
		"gvs_conntrack_evicted_total": dto.MetricType_COUNTER, "gvs_conntrack_flushed_total": dto.MetricType_COUNTER,
		"gvs_conntrack_invalid_total": dto.MetricType_COUNTER,
		"gvs_rx_buffer_bytes":         dto.MetricType_GAUGE, "gvs_rx_buffer_budget_bytes": dto.MetricType_GAUGE,
		"gvs_rx_buffer_denials_total": dto.MetricType_COUNTER,
	} {
		f := fams[name]
		if f == nil {
			t.Errorf("no metric family %s", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s is a %v, want %v", name, f.GetType(), typ)
		}
	}
	if n := cniCount(fams, "ADD", "success"); n != 1 {
		t.Errorf("CNI ADD successes: %d, want 1", n)
	}
	if n := cniCount(fams, "ADD", "error"); n != 1 {
		t.Errorf("CNI ADD errors: %d, want 1", n)
	}
	if n := cniCount(fams, "other", "success"); n != 1 {
		t.Errorf("unknown verbs are not counted as other: %d", n)
	}
	if g := fams["gvs_captures_active"].GetMetric()[0].GetGauge().GetValue(); g != 1 {
		t.Errorf("gvs_captures_active = %v, want 1", g)
	}
	if g := fams["gvs_conntrack_entries_limit"].GetMetric()[0].GetGauge().GetValue(); g != float64(d.dp.sw.Conntrack().Cap()) {
		t.Errorf("gvs_conntrack_entries_limit = %v, want %d", g, d.dp.sw.Conntrack().Cap())
	}
	if n := len(fams["gvs_conntrack_entries"].GetMetric()); n != 13 {
		t.Errorf("gvs_conntrack_entries has %d series, want one per protocol and state (13)", n)
	}
	if g := fams["gvs_rx_buffer_budget_bytes"].GetMetric()[0].GetGauge().GetValue(); g != float64(max(64, 16*runtime.NumCPU())<<20) {
		t.Errorf("gvs_rx_buffer_budget_bytes = %v, want the default for %d CPUs", g, runtime.NumCPU())
	}
	if g := fams["gvs_flow_rules"].GetMetric()[0].GetGauge().GetValue(); g != float64(d.dp.table.Len()) {
		t.Errorf("gvs_flow_rules = %v, want %d", g, d.dp.table.Len())
	}
}

// TestMetricsRings: with io_uring the rings the pod queues hold are a gauge
// per direction (uring.LiveRings), and gvsctl show says the same; without
// io_uring neither appears.
func TestMetricsRings(t *testing.T) {
	d := newTestDaemon(t)
	for _, engine := range []string{IOEngineTAP, IOEngineUring, IOEngineUringAlways} {
		d.dp.engine = engine
		f := scrape(t, d)["gvs_io_uring_rings"]
		if engine == IOEngineTAP {
			if f != nil || d.dp.ringsState() != "" {
				t.Errorf("ioEngine tap: rings reported (%v, %q)", f, d.dp.ringsState())
			}
			continue
		}
		if f == nil || f.GetType() != dto.MetricType_GAUGE {
			t.Fatalf("ioEngine %s: no gauge gvs_io_uring_rings (%v)", engine, f)
		}
		rx, tx := uring.LiveRings()
		want := map[string]float64{"receive": float64(rx), "transmit": float64(tx)}
		for _, m := range f.GetMetric() {
			dir := m.GetLabel()[0].GetValue()
			if v, ok := want[dir]; !ok || m.GetGauge().GetValue() != v {
				t.Errorf("ioEngine %s: %s rings %v, want %v", engine, dir, m.GetGauge().GetValue(), want[dir])
			}
			delete(want, dir)
		}
		if len(want) != 0 {
			t.Errorf("ioEngine %s: no series for %v", engine, want)
		}
		if s, w := d.dp.ringsState(), fmt.Sprintf("%d receive (a thread each), %d transmit", rx, tx); s != w {
			t.Errorf("ioEngine %s: show says %q, want %q", engine, s, w)
		}
	}
}
