package netns

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/traffic"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" valid, else a part of the error
	}{
		{Config{}, ""},
		{Config{Mode: ModeEtcd}, ""},
		{Config{Mode: ModeKube, Prefix: "gvsn-x"}, ""},
		{Config{Mode: ModeNetpol}, ""},
		{Config{Mode: "cluster"}, `-mode "cluster": etcd, kube, netpol`},
		{Config{Mode: "ETCD"}, `-mode "ETCD"`},
		{Config{Prefix: "Upper"}, `-prefix "Upper"`},
		{Config{Prefix: "much-too-long-prefix"}, `-prefix`},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
	if err := (Config{Prefix: "a_b"}).Validate(); !errors.Is(err, lab.ErrInvalidSpec) {
		t.Errorf("a bad prefix: %v, want lab.ErrInvalidSpec", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	var c Config
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.Prefix != Prefix || c.Mode != ModeEtcd || c.Out == nil || c.BinDir == "" || c.ThroughputTime != 5*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	c = Config{Prefix: "p", Mode: ModeKube, BinDir: "/x"}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.Prefix != "p" || c.Mode != ModeKube || c.BinDir != "/x" {
		t.Errorf("defaults overwrote set fields: %+v", c)
	}
}

func TestParseTransfer(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      traffic.Result
		err       error
	}{
		{"plain", "sent 1000000 bytes in 12.345ms: 0.648 Gbit/s, intact=true, seen as 192.168.240.11:40312\n",
			traffic.Result{Bytes: 1000000, Duration: 12345 * time.Microsecond, Intact: true, SeenAs: "192.168.240.11:40312"}, nil},
		{"named server, not intact", "sent 42 bytes in 5.000001s: 0.000 Gbit/s, intact=false, seen as 10.128.0.3:1234 by web-1\n",
			traffic.Result{Bytes: 42, Duration: 5*time.Second + time.Microsecond, SeenAs: "10.128.0.3:1234", Server: "web-1"}, nil},
		{"among other lines", "warning: something\nsent 7 bytes in 1s: 0.000 Gbit/s, intact=true, seen as 1.2.3.4:5\ntrailer\n",
			traffic.Result{Bytes: 7, Duration: time.Second, Intact: true, SeenAs: "1.2.3.4:5"}, nil},
		{"an error only", "gvs-bench: dial tcp 172.30.0.10:80: i/o timeout\n", traffic.Result{}, ErrNoTransfer},
		{"empty", "", traffic.Result{}, ErrNoTransfer},
	} {
		got, err := ParseTransfer([]byte(tc.out))
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
	if r, _ := ParseTransfer([]byte("sent 625000000 bytes in 1s: 5.000 Gbit/s, intact=true, seen as 1.2.3.4:5\n")); r.Gbps() != 5 {
		t.Errorf("Gbps of 625 MB in 1 s: %v, want 5", r.Gbps())
	}
}

func TestSeenFrom(t *testing.T) {
	node := netip.MustParseAddr("192.168.240.11")
	for seen, want := range map[string]bool{
		"192.168.240.11:40312": true,
		"192.168.240.111:4031": false, // a prefix of the text is not the address
		"10.128.0.3:40312":     false,
		"192.168.240.11":       false, // no port: not what a server reports
		"":                     false,
	} {
		if got := seenFrom(seen, node); got != want {
			t.Errorf("seenFrom(%q, %s) = %v, want %v", seen, node, got, want)
		}
	}
}

func TestTeardown(t *testing.T) {
	if got := teardown(Config{Prefix: Prefix, BinDir: "/b"}); got != "make demo-down" {
		t.Errorf("default prefix: %q", got)
	}
	if got, want := teardown(Config{Prefix: "gvsn-x", BinDir: "/b"}), "/b/gvs-demo down -prefix gvsn-x"; got != want {
		t.Errorf("other prefix: %q, want %q", got, want)
	}
}

func TestIndent(t *testing.T) {
	if got, want := indent("a\nb\n\n"), "    a\n    b\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := indent("one"), "    one\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestPolicyWant checks the matrix the netpol step expects from alpha's
// policies: alpha's pods admit only alpha, the others admit everyone, and
// every pod reaches itself.
func TestPolicyWant(t *testing.T) {
	pod := func(project string) cluster.Pod {
		return cluster.Pod{Pod: lab.Pod{Name: project, Project: project}}
	}
	pods := []cluster.Pod{pod("default"), pod("alpha"), pod("beta")}
	m := cluster.Matrix{Pods: pods, Want: [][]bool{make([]bool, 3), make([]bool, 3), make([]bool, 3)}}
	setWant(m, policyWant)
	want := [][]bool{ // rows from, columns to: default, alpha, beta
		{true, false, true},
		{true, true, true},
		{true, false, true},
	}
	for i := range want {
		for j := range want[i] {
			if m.Want[i][j] != want[i][j] {
				t.Errorf("%s → %s: want %v, got %v", pods[i].Project, pods[j].Project, want[i][j], m.Want[i][j])
			}
		}
	}
}

// TestMulticastOn reads the MULTICAST column of gvsctl projects list, in
// the registry's table and in the Kubernetes one (with PENDING after it).
func TestMulticastOn(t *testing.T) {
	reg := "PROJECT  VNID  MULTICAST\nalpha    10    on\nbeta     11    off\n"
	kube := "PROJECT  VNID  MULTICAST  PENDING\nalpha    10    off        \nbeta     11    on         join:alpha\n"
	for _, tc := range []struct {
		table, project string
		want           bool
	}{{reg, "alpha", true}, {reg, "beta", false}, {reg, "gamma", false}, {kube, "alpha", false}, {kube, "beta", true},
		{"PROJECT  VNID\nalpha    10\n", "alpha", false}} {
		if got := multicastOn(tc.table, tc.project); got != tc.want {
			t.Errorf("%q in %q: %v, want %v", tc.project, tc.table, got, tc.want)
		}
	}
}
