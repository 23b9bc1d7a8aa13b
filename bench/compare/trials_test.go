package compare

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseSetting(t *testing.T) {
	s, err := ParseSetting(`on={"busyPoll":"50us","schedSlice":"0"}`)
	if err != nil || s.Name != "on" || string(s.Daemon) != `{"busyPoll":"50us","schedSlice":"0"}` {
		t.Fatalf("ParseSetting: %+v, %v", s, err)
	}
	if s, err := ParseSetting("defaults"); err != nil || s.Name != "defaults" || s.Daemon != nil {
		t.Fatalf("bare name: %+v, %v", s, err)
	}
	for _, bad := range []string{"", `={"busyPoll":"0"}`, `a b={}`, `x={"busyPoll":`, `x={"busyPol":"0"}`, `x={"queues":"two"}`, `x={} {}`} {
		if _, err := ParseSetting(bad); err == nil {
			t.Errorf("ParseSetting(%q) succeeded", bad)
		}
	}
}

func TestTrialsDefaults(t *testing.T) {
	dir := t.TempDir()
	one, _ := ParseSetting("a")
	two, _ := ParseSetting("b")
	for _, c := range []TrialsConfig{
		{BinDir: dir, Settings: []Setting{one}},
		{BinDir: dir, Settings: []Setting{one, one}},
		{BinDir: dir, Settings: []Setting{one, two}, Prefix: "toolong"},
		{BinDir: dir, Settings: []Setting{one, two}}, // no binaries
	} {
		if err := c.defaults(); err == nil {
			t.Errorf("defaults(%+v) accepted", c)
		}
	}
}

// TestOrder: every setting goes first once every n trials, and each trial
// runs every setting once.
func TestOrder(t *testing.T) {
	first := map[int]int{}
	for k := range 6 {
		o := order(k, 3)
		if s := slices.Sorted(slices.Values(o)); !slices.Equal(s, []int{0, 1, 2}) {
			t.Fatalf("trial %d order %v", k, o)
		}
		first[o[0]]++
	}
	if first[0] != 2 || first[1] != 2 || first[2] != 2 {
		t.Errorf("first settings %v", first)
	}
}

func TestTrialsTable(t *testing.T) {
	off, _ := ParseSetting(`off={"busyPoll":"0"}`)
	on, _ := ParseSetting(`on={"busyPoll":"50us"}`)
	r := &TrialsReport{Duration: 4 * time.Second, Settings: []SettingResult{
		{Setting: off, Trials: []Trial{{TCP1Gbps: 7, LoadP99us: 4000}, {TCP1Gbps: 8, LoadP99us: 3000}, {TCP1Gbps: 6, LoadP99us: 3500}}},
		{Setting: on, Trials: []Trial{{TCP1Gbps: 7.5, LoadP99us: 3000}, {TCP1Gbps: 7, LoadP99us: 3200}, {TCP1Gbps: 6.5, LoadP99us: 2500}}},
	}}
	if wins, n := better(r.Settings[0].Trials, r.Settings[1].Trials, func(t Trial) float64 { return t.LoadP99us }, true); wins != 2 || n != 3 {
		t.Errorf("lower p99 in %d of %d trials, want 2 of 3", wins, n)
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"better than off", "2 of 3", "3000", "7.00", "medians of 3 trials", `on: {"busyPoll":"50us"}`} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var tcp string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "TCP 1 stream alone") {
			tcp = l
		}
	}
	// Medians 7 and 7; on beat off in trial 1 and 3.
	if f := strings.Fields(tcp); len(f) < 3 || !strings.Contains(tcp, "2 of 3") {
		t.Errorf("TCP row %q", tcp)
	}
}
