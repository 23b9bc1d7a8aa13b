package compare

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// targetReport is a synthetic report: gvs, the floor and OVS with one
// value per targeted row in each of three runs (the medians are set from
// them), gvs/floor at 0.95 on throughput and OVS far behind.
func targetReport() *Report {
	mk := func(tcp, nodrop, gso, cpu, idle, load float64) Metrics {
		return Metrics{TCP1Gbps: tcp, TCP4Gbps: tcp * 1.5, UDP64NoDropKpps: nodrop, UDP1400GSOKpps: gso,
			CPUSecPerGbit: cpu, RTTIdleP50us: idle, RTTLoadP99us: load}
	}
	res := func(dp string, runs ...Metrics) Result {
		return Result{Dataplane: dp, Status: StatusOK, Runs: runs, Metrics: median(runs)}
	}
	return &Report{Runs: 3, Dataplanes: []Result{
		res("gvs", mk(9.5, 950, 380, 0.22, 110, 500), mk(9.4, 940, 370, 0.21, 100, 400), mk(9.6, 960, 390, 0.23, 120, 600)),
		res("kernel", mk(20, 2000, 800, 0.1, 60, 200), mk(20, 2000, 800, 0.1, 60, 200), mk(20, 2000, 800, 0.1, 60, 200)),
		res("ovs", mk(1, 100, 50, 1, 300, 2000), mk(1, 100, 50, 1, 300, 2000), mk(1.5, 150, 50, 1, 300, 1000)),
		res("floor", mk(10, 1000, 400, 0.2, 100, 300), mk(10, 1000, 400, 0.2, 100, 300), mk(10, 1000, 400, 0.2, 100, 300)),
	}}
}

// verdicts returns "name/ref" → verdict.
func verdicts(rs []TargetResult) map[string]string {
	out := map[string]string{}
	for _, r := range rs {
		out[r.Name+"/"+r.Ref] = r.Verdict
	}
	return out
}

func TestCheckTargets(t *testing.T) {
	r := targetReport()
	got := verdicts(CheckTargets(r))
	want := map[string]string{
		"TCP 1 stream/floor":                       Met,    // 9.5/10
		"TCP 4 streams/floor":                      Met,    // same ratio
		"UDP 64 B no-loss rate/floor":              Met,    // 0.95
		"UDP 1400 B GSO rate/floor":                Met,    // 0.95
		"CPU s per Gbit (machine)/floor":           Met,    // 1.1
		"idle UDP-probe RTT p50/floor":             Met,    // 1.1
		"TCP 1 stream/ovs":                         Met,    // runs 9.5, 9.4, 6.4
		"TCP 4 streams/ovs":                        Met,    // the same
		"UDP 64 B no-loss rate/ovs":                Met,    // 9.5, 9.4, 6.4
		"UDP-probe RTT p99 under 1 TCP stream/ovs": Missed, // run 3: 600/1000 = 0.6
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s, want %s", k, got[k], v)
		}
	}
	if len(got) != len(Targets) {
		t.Errorf("%d results for %d targets", len(got), len(Targets))
	}
	for _, res := range CheckTargets(r) {
		if res.Name == "UDP-probe RTT p99 under 1 TCP stream" && (len(res.Runs) != 3 || res.Ratio != 0.6) {
			t.Errorf("load p99: worst ratio %v of runs %v, want 0.6 of 3", res.Ratio, res.Runs)
		}
		if res.Name == "TCP 1 stream" && res.Ref == "ovs" && (res.Ratio < 6.39 || res.Ratio > 6.41) {
			t.Errorf("TCP 1 vs ovs: worst ratio %v, want 6.4", res.Ratio)
		}
	}
}

// TestCheckTargetsMissed moves gvs under each floor bar in turn.
func TestCheckTargetsMissed(t *testing.T) {
	for _, tc := range []struct {
		target string
		spoil  func(m *Metrics)
	}{
		{"TCP 1 stream/floor", func(m *Metrics) { m.TCP1Gbps = 8.9 }},
		{"TCP 4 streams/floor", func(m *Metrics) { m.TCP4Gbps = 13 }},
		{"UDP 64 B no-loss rate/floor", func(m *Metrics) { m.UDP64NoDropKpps = 899 }},
		{"UDP 1400 B GSO rate/floor", func(m *Metrics) { m.UDP1400GSOKpps = 359 }},
		{"CPU s per Gbit (machine)/floor", func(m *Metrics) { m.CPUSecPerGbit = 0.231 }},
		{"idle UDP-probe RTT p50/floor", func(m *Metrics) { m.RTTIdleP50us = 121 }},
	} {
		r := targetReport()
		tc.spoil(&r.Get("gvs").Metrics)
		if v := verdicts(CheckTargets(r))[tc.target]; v != Missed {
			t.Errorf("%s: %s, want missed", tc.target, v)
		}
	}
	// One run under 6× OVS is enough to miss an every-run target, even
	// with the medians far above it.
	r := targetReport()
	r.Get("ovs").Runs[1].TCP1Gbps = 2
	if v := verdicts(CheckTargets(r))["TCP 1 stream/ovs"]; v != Missed {
		t.Errorf("TCP 1 vs ovs with run 2 at 4.7×: %s, want missed", v)
	}
}

func TestCheckTargetsNotMeasured(t *testing.T) {
	r := targetReport()
	r.Get("floor").Status = StatusFailed
	r.Get("ovs").Status = StatusMissing
	for _, res := range CheckTargets(r) {
		if res.Ref != "floor" && res.Ref != "ovs" {
			continue // the kernel and gvs are there: TestCheckTargetsConntrackNotMeasured
		}
		if res.Verdict != NA || res.Why != "no "+res.Ref+" result" {
			t.Errorf("%s/%s: %s (%s), want n/a: no %s result", res.Name, res.Ref, res.Verdict, res.Why, res.Ref)
		}
	}
	r = targetReport()
	g := r.Get("gvs")
	g.UDP64NoDropKpps = 0 // a -tcp1-only report
	for i := range g.Runs {
		g.Runs[i].UDP64NoDropKpps = 0
	}
	got := verdicts(CheckTargets(r))
	if got["UDP 64 B no-loss rate/floor"] != NA || got["UDP 64 B no-loss rate/ovs"] != NA || got["TCP 1 stream/floor"] != Met {
		t.Errorf("row missing: %v", got)
	}
}

// TestTargetsFromJSON checks a report as check-targets reads it: through
// its JSON.
func TestTargetsFromJSON(t *testing.T) {
	b, err := json.Marshal(targetReport())
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteTargets(&out, CheckTargets(&r)); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"TCP 1 stream ≥ 0.9× floor", "0.95×", "UDP-probe RTT p99 under 1 TCP stream ≤ 0.5× ovs, every run",
		"0.60× (runs 0.25, 0.20, 0.60)", "missed", "9 of 13 targets met, 3 not measured",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}

func TestTableFloorRatio(t *testing.T) {
	var b bytes.Buffer
	if err := targetReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "gvs/floor") || !strings.Contains(b.String(), "0.95×") {
		t.Errorf("no gvs/floor ratios:\n%s", b.String())
	}
}
