package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/compare"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestCompare runs a short `gvs-bench compare` (one run, 1 s per workload,
// the conntrack rows included) on gvs and the kernel, and on OVS when it
// is installed, and checks that
// every present dataplane has positive numbers in the JSON report and an
// absent one is reported missing.
func TestCompare(t *testing.T) {
	needRoot(t)
	dps := []string{cluster.DataplaneGVS, cluster.DataplaneKernel, cluster.DataplaneOVS}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := compare.Run(ctx, compare.Config{
		BinDir:     binDir,
		Dataplanes: dps,
		Runs:       1,
		Duration:   time.Second,
		Prefix:     "gvtcmp",
		Underlay:   netip.MustParsePrefix("192.168.246.0/24"),
		Progress:   &progress,
		Conntrack:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Dataplanes []map[string]any `json:"dataplanes"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Dataplanes) != len(dps) {
		t.Fatalf("%d dataplanes in the report, want %d", len(got.Dataplanes), len(dps))
	}
	ovsMissing := cluster.OVSAvailable() != nil
	for _, d := range got.Dataplanes {
		name, status := d["dataplane"].(string), d["status"].(string)
		if name == cluster.DataplaneOVS && ovsMissing {
			if status != compare.StatusMissing {
				t.Errorf("ovs not installed but status %q", status)
			}
			continue
		}
		if status != compare.StatusOK {
			t.Errorf("%s: status %q: %v", name, status, d["error"])
			continue
		}
		for _, k := range []string{"tcp1_gbps", "tcp4_gbps", "udp64_kpps", "udp1400_kpps", "udp1400_gso_kpps", "rtt_idle_p50_us", "rtt_idle_p99_us",
			"udp64_blast_kpps", "udp64_blast_offered_kpps", "udp1400_blast_kpps", "udp1400_blast_offered_kpps",
			"rtt_ping_idle_p50_us", "rtt_ping_idle_p99_us", "rtt_ping_load_p50_us", "rtt_ping_load_p99_us",
			"rtt_ping_sparse_p50_us", "rtt_ping_sparse_p99_us", "tcp1_ct_gbps", "conn_per_s_ct", "conn_per_s_bare"} {
			if v, ok := d[k].(float64); !ok || v <= 0 {
				t.Errorf("%s: %s = %v, want > 0", name, k, d[k])
			}
		}
		// The no-loss search may find no passing rate on a loaded
		// machine: the keys must be there, not positive.
		for _, k := range []string{"udp64_nodrop_kpps", "udp1400_nodrop_kpps"} {
			if v, ok := d[k].(float64); !ok || v < 0 {
				t.Errorf("%s: %s = %v, want ≥ 0", name, k, d[k])
			}
		}
		for _, k := range []string{"udp64_loss", "udp1400_loss", "udp1400_gso_loss", "udp64_blast_loss", "udp1400_blast_loss"} {
			if v, ok := d[k].(float64); !ok || v < 0 || v > 1 {
				t.Errorf("%s: %s = %v, want a fraction", name, k, d[k])
			}
		}
		for _, size := range []string{"64", "1400"} {
			got, offered := d["udp"+size+"_blast_kpps"].(float64), d["udp"+size+"_blast_offered_kpps"].(float64)
			if got > offered {
				t.Errorf("%s: %s B blast delivered %v kpps of %v offered", name, size, got, offered)
			}
		}
		for _, k := range []string{"rtt_ping_idle", "rtt_ping_sparse"} {
			if p50, p99 := d[k+"_p50_us"].(float64), d[k+"_p99_us"].(float64); p50 > p99 {
				t.Errorf("%s: %s p50 %v > p99 %v", name, k, p50, p99)
			}
		}
	}
	var table, svg bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "gvs/kernel") || !strings.HasPrefix(svg.String(), "<svg") {
		t.Errorf("table or chart incomplete:\n%s", table.String())
	}
	if t.Failed() {
		t.Logf("progress:\n%s\ntable:\n%s", progress.String(), table.String())
	}
}
