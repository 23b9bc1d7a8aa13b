package e2e

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/compare"
)

// TestTrials runs a short `gvs-bench trials` (one trial of two settings,
// 1 s per workload) and checks that each setting's cluster measured every
// row and that the table compares the second with the first; a setting
// whose value gvs-switchd refuses fails the run with gvs-switchd's reason.
func TestTrials(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	off, err := compare.ParseSetting(`off={"busyPoll":"0"}`)
	if err != nil {
		t.Fatal(err)
	}
	on, err := compare.ParseSetting(`on={"busyPoll":"50us"}`)
	if err != nil {
		t.Fatal(err)
	}
	cfg := compare.TrialsConfig{
		BinDir:   binDir,
		Settings: []compare.Setting{off, on},
		Trials:   1,
		Duration: time.Second,
		Prefix:   "gvttr",
		Underlay: netip.MustParsePrefix("192.168.248.0/24"),
	}
	rep, err := compare.RunTrials(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Settings {
		if len(s.Trials) != 1 {
			t.Fatalf("%s: %d trials, want 1", s.Name, len(s.Trials))
		}
		tr := s.Trials[0]
		for name, v := range map[string]float64{"TCP": tr.TCP1Gbps, "TCP under probes": tr.LoadTCPbps, "idle p50": tr.IdleP50us,
			"idle p99": tr.IdleP99us, "load p50": tr.LoadP50us, "load p90": tr.LoadP90us, "load p99": tr.LoadP99us} {
			if v <= 0 {
				t.Errorf("%s: %s = %v, want > 0", s.Name, name, v)
			}
		}
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "better than off") || !strings.Contains(out, " of 1") {
		t.Errorf("table:\n%s", out)
	}

	bad, err := compare.ParseSetting(`bad={"busyPoll":"2ms"}`)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Settings = []compare.Setting{bad, on}
	if _, err := compare.RunTrials(ctx, cfg); err == nil || !strings.Contains(err.Error(), "busyPoll") {
		t.Errorf("a setting gvs-switchd refuses: %v, want its reason", err)
	}
}
