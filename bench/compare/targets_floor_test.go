package compare

import (
	"bytes"
	"strings"
	"testing"
)

// TestCheckTargetsFloorOnTheSameBar checks that the bars against OVS and
// the kernel are also checked with the floor's rows in place of gvs's, and
// only those.
func TestCheckTargetsFloorOnTheSameBar(t *testing.T) {
	r := targetReport()
	// The floor's run 2 carries 4.5× OVS's 64 B rate: under the 6× bar
	// gvs is not held to, over the 4× it is: met. Its p99 under load in
	// run 3 is 0.6× OVS's: missed, like gvs's.
	r.Get("floor").Runs[1].UDP64NoDropKpps = 450
	r.Get("floor").Runs[2].RTTLoadP99us = 600
	byKey := map[string]TargetResult{}
	for _, res := range CheckTargets(r) {
		byKey[res.Name+"/"+res.Ref] = res
	}
	for key, want := range map[string]string{
		"TCP 1 stream/ovs":                         Met, // floor runs 10, 10, 6.67
		"UDP 64 B no-loss rate/ovs":                Met, // 10, 4.5, 6.67
		"UDP-probe RTT p99 under 1 TCP stream/ovs": Missed,
	} {
		fl := byKey[key].Floor
		if fl == nil {
			t.Errorf("%s: no floor verdict", key)
			continue
		}
		if fl.Verdict != want {
			t.Errorf("%s: floor %s (ratio %v, runs %v), want %s", key, fl.Verdict, fl.Ratio, fl.Runs, want)
		}
	}
	if q := byKey["UDP 64 B no-loss rate/ovs"].Floor.Ratio; q != 4.5 {
		t.Errorf("floor's worst 64 B run against OVS: %v, want 4.5", q)
	}
	for key, res := range byKey {
		if strings.HasSuffix(key, "/floor") && res.Floor != nil {
			t.Errorf("%s: a target against the floor has a floor verdict", key)
		}
	}

	var out bytes.Buffer
	if err := WriteTargets(&out, CheckTargets(r)); err != nil {
		t.Fatal(err)
	}
	// gvs misses one bar (p99 under load, run 3), and the floor misses it too.
	for _, want := range []string{"floor on the same bar", "4.50", "the floor missed 1 of the missed ones too"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	// Without a floor there is no floor verdict, and nothing claims one.
	r.Get("floor").Status = StatusFailed
	for _, res := range CheckTargets(r) {
		if res.Floor != nil {
			t.Errorf("%s/%s: floor verdict without a floor result", res.Name, res.Ref)
		}
	}
}
