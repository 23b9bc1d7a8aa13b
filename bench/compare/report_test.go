package compare

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	m := median([]Metrics{{TCP1Gbps: 3, RTTIdleP50us: 10}, {TCP1Gbps: 1, RTTIdleP50us: 30}, {TCP1Gbps: 2, RTTIdleP50us: 20}})
	if m.TCP1Gbps != 2 || m.RTTIdleP50us != 20 {
		t.Errorf("median = %+v", m)
	}
	if got := medianOf([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 4 = %v", got)
	}
}

func testReport() *Report {
	return &Report{Runs: 3, Dataplanes: []Result{
		{Dataplane: "gvs", Status: StatusOK, Metrics: Metrics{TCP1Gbps: 6, UDP64Kpps: 200, RTTIdleP50us: 150}},
		{Dataplane: "kernel", Status: StatusOK, Metrics: Metrics{TCP1Gbps: 12, UDP64Kpps: 300, RTTIdleP50us: 100}},
		{Dataplane: "ovs", Status: StatusMissing, Error: "not installed"},
	}}
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	if err := testReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{"gvs/kernel", "0.50×", "1.50×", "missing", "ovs missing: not installed"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "gvs/ovs") {
		t.Errorf("ratio to a missing dataplane:\n%s", s)
	}
}

func TestSVGAndJSON(t *testing.T) {
	var b bytes.Buffer
	r := testReport()
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "<svg") || !strings.Contains(b.String(), "ovs (missing)") {
		t.Errorf("svg:\n%s", b.String())
	}
	j, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Dataplanes []map[string]any }
	if err := json.Unmarshal(j, &got); err != nil {
		t.Fatal(err)
	}
	if got.Dataplanes[0]["tcp1_gbps"] != 6.0 || got.Dataplanes[2]["status"] != "missing" {
		t.Errorf("json: %s", j)
	}
}

// TestMetricsKeys pins the JSON keys that scripts and docs rely on, and
// checks that every metric has a table row.
func TestMetricsKeys(t *testing.T) {
	j, err := json.Marshal(Metrics{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tcp1_gbps", "tcp4_gbps", "udp64_kpps", "udp1400_kpps", "udp1400_gso_kpps", "rtt_idle_p50_us", "rtt_idle_p99_us",
		"udp64_blast_kpps", "udp64_blast_offered_kpps", "udp64_blast_loss", "udp1400_blast_kpps", "udp1400_blast_loss",
		"rtt_ping_idle_p50_us", "rtt_ping_idle_p99_us", "rtt_ping_load_p50_us", "rtt_ping_load_p99_us",
		"rtt_ping_sparse_p50_us", "rtt_ping_sparse_p99_us", "cpu_s_per_gbit",
		"udp64_nodrop_kpps", "udp1400_nodrop_kpps", "udp64_nodrop_bare_kpps", "tcp1_ct_gbps", "conn_per_s_ct", "conn_per_s_bare"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no key %q in %s", k, j)
		}
	}
	if len(rows) != len(m) {
		t.Errorf("%d table rows for %d metrics", len(rows), len(m))
	}
}
