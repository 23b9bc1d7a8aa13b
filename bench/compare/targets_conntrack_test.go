package compare

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// ctReport is targetReport with the connection-tracking rows of
// compare -conntrack: gvs at 7 000 connections/s through the stateful rules
// against the kernel's 7 500 (0.93×) and the floor's 8 000 without rules
// (0.875×), and gvs's TCP through the rules at 9.0 of 9.5 Gbit/s without
// (0.95×).
func ctReport() *Report {
	r := targetReport()
	set := func(dp string, conn, tcpCT float64) {
		d := r.Get(dp)
		for i := range d.Runs {
			d.Runs[i].ConnPerSecCT, d.Runs[i].TCP1CTGbps, d.Runs[i].ConnPerSecBare = conn, tcpCT, 10000
		}
		d.Metrics = median(d.Runs)
	}
	set("gvs", 7000, 9.0)
	set("kernel", 7500, 18)
	set("ovs", 4000, 0.9)
	set("floor", 8000, 10)
	return r
}

// ctTargets are the keys of verdicts for the connection-tracking targets.
var ctTargets = []string{
	"new TCP connections/s, stateful rules/kernel",
	"new TCP connections/s, stateful rules/floor",
	"TCP 1 stream, stateful rules/gvs",
}

func TestCheckTargetsConntrack(t *testing.T) {
	res := CheckTargets(ctReport())
	got := verdicts(res)
	for _, k := range ctTargets {
		if got[k] != Met {
			t.Errorf("%s: %s, want met", k, got[k])
		}
	}
	want := map[string]float64{ // gvs ÷ the reference, of the medians
		"new TCP connections/s, stateful rules/kernel": 7000.0 / 7500,
		"new TCP connections/s, stateful rules/floor":  7000.0 / 8000,
		"TCP 1 stream, stateful rules/gvs":             9.0 / 9.5, // gvs's own TCP without rules, not the floor's
	}
	for _, r := range res {
		if q, ok := want[r.Name+"/"+r.Ref]; ok && (r.Ratio < q-1e-9 || r.Ratio > q+1e-9) {
			t.Errorf("%s/%s: ratio %v, want %v", r.Name, r.Ref, r.Ratio, q)
		}
	}
	// Each bar missed on its own.
	for _, tc := range []struct {
		target string
		spoil  func(r *Report)
	}{
		{ctTargets[0], func(r *Report) { r.Get("kernel").ConnPerSecCT = 7800 }}, // 0.897×
		{ctTargets[1], func(r *Report) { r.Get("floor").ConnPerSecCT = 8800 }},  // 0.795×
		{ctTargets[2], func(r *Report) { r.Get("gvs").TCP1CTGbps = 8.5 }},       // 0.895×
		{ctTargets[2], func(r *Report) { r.Get("gvs").TCP1Gbps = 10.1 }},        // 0.891×
	} {
		r := ctReport()
		tc.spoil(r)
		got := verdicts(CheckTargets(r))
		if got[tc.target] != Missed {
			t.Errorf("%s: %s, want missed", tc.target, got[tc.target])
		}
		for _, k := range ctTargets {
			if k != tc.target && got[k] != Met {
				t.Errorf("spoiling %s moved %s to %s", tc.target, k, got[k])
			}
		}
	}
}

// TestCheckTargetsConntrackNotMeasured: without the -conntrack rows, or
// without the reference dataplane, the three bars are not measured, as
// the others are.
func TestCheckTargetsConntrackNotMeasured(t *testing.T) {
	for _, r := range CheckTargets(targetReport()) {
		for _, k := range ctTargets {
			if r.Name+"/"+r.Ref == k && (r.Verdict != NA || r.Why != "row not measured") {
				t.Errorf("%s without the conntrack rows: %s (%s), want n/a: row not measured", k, r.Verdict, r.Why)
			}
		}
	}
	r := ctReport()
	r.Get("kernel").Status = StatusFailed
	got := verdicts(CheckTargets(r))
	if got[ctTargets[0]] != NA || got[ctTargets[1]] != Met || got[ctTargets[2]] != Met {
		t.Errorf("kernel failed: %v", got)
	}
	r = ctReport()
	r.Get("floor").ConnPerSecCT = 0 // the floor's connection row failed to measure
	if v := verdicts(CheckTargets(r))[ctTargets[1]]; v != NA {
		t.Errorf("floor without a connection rate: %s, want n/a", v)
	}
}

// TestCheckTargetsConntrackOnly checks a compare -conntrack-only report
// through its JSON, as check-targets reads it: only TCP 1 stream and the
// conntrack rows, the other bars not measured.
func TestCheckTargetsConntrackOnly(t *testing.T) {
	r := ctReport()
	for i := range r.Dataplanes {
		d := &r.Dataplanes[i]
		for k, m := range d.Runs {
			d.Runs[k] = Metrics{TCP1Gbps: m.TCP1Gbps, CPUSecPerGbit: m.CPUSecPerGbit, DataplaneCPUSecPerGbit: m.DataplaneCPUSecPerGbit,
				TCP1CTGbps: m.TCP1CTGbps, ConnPerSecCT: m.ConnPerSecCT, ConnPerSecBare: m.ConnPerSecBare}
		}
		d.Metrics = median(d.Runs)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	got := verdicts(CheckTargets(&back))
	for _, k := range ctTargets {
		if got[k] != Met {
			t.Errorf("%s: %s, want met", k, got[k])
		}
	}
	if got["TCP 4 streams/floor"] != NA || got["UDP 64 B no-loss rate/ovs"] != NA {
		t.Errorf("rows of a -conntrack-only report that it does not have: %v", got)
	}
	var out bytes.Buffer
	if err := WriteTargets(&out, CheckTargets(&back)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"new TCP connections/s, stateful rules ≥ 0.9× kernel", "0.93×",
		"new TCP connections/s, stateful rules ≥ 0.8× floor", "0.88×",
		"TCP 1 stream, stateful rules ≥ 0.9× gvs TCP 1 stream without rules", "0.95×",
		"6 of 13 targets met, 7 not measured",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
