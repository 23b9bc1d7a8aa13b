package lab

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := Spec{Prefix: "gvs-demo"}
	tests := []struct {
		name string
		mod  func(*Spec)
		ok   bool
	}{
		{"defaults", func(*Spec) {}, true},
		{"full", func(s *Spec) {
			s.Nodes, s.PodsPerNode, s.Projects, s.External = 3, 4, []string{"a", "b"}, true
			s.Underlay = netip.MustParsePrefix("10.9.8.0/24")
		}, true},
		{"unmasked underlay", func(s *Spec) { s.Underlay = netip.MustParsePrefix("10.9.8.7/24") }, true},
		{"empty prefix", func(s *Spec) { s.Prefix = "" }, false},
		{"long prefix", func(s *Spec) { s.Prefix = "abcdefghijklm" }, false},
		{"upper prefix", func(s *Spec) { s.Prefix = "Gvs" }, false},
		{"slash prefix", func(s *Spec) { s.Prefix = "../x" }, false},
		{"negative nodes", func(s *Spec) { s.Nodes = -1 }, false},
		{"too many nodes", func(s *Spec) { s.Nodes = MaxNodes + 1 }, false},
		{"nodes hit external", func(s *Spec) { s.Nodes, s.External = 190, true }, false},
		{"negative pods", func(s *Spec) { s.PodsPerNode = -1 }, false},
		{"empty project", func(s *Spec) { s.Projects = []string{"a", ""} }, false},
		{"ipv6 underlay", func(s *Spec) { s.Underlay = netip.MustParsePrefix("fd00::/64") }, false},
		{"/25 underlay", func(s *Spec) { s.Underlay = netip.MustParsePrefix("10.0.0.0/25") }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.mod(&s)
			err := s.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("error %v does not wrap ErrInvalidSpec", err)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	s := Spec{Prefix: "t", Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha"}, External: true}.WithDefaults()
	l := describe(s)
	if len(l.Nodes) != 2 || len(l.Nodes[1].Pods) != 3 {
		t.Fatalf("shape: %+v", l.Nodes)
	}
	n := l.Nodes[1]
	if n.Name != "n2" || n.NS != "t-n2" || n.NSPath != "/run/netns/t-n2" || n.IP != netip.MustParseAddr("172.30.0.12") {
		t.Errorf("node 2 = %+v", n)
	}
	p := n.Pods[2]
	if p.Name != "n2-p3" || p.NS != "t-n2-p3" || p.Project != "default" || p.Node != 1 {
		t.Errorf("pod 3 of node 2 = %+v", p)
	}
	if n.Pods[1].Project != "alpha" {
		t.Errorf("pod 2 project = %q, want alpha", n.Pods[1].Project)
	}
	if l.External == nil || l.External.NS != "t-ext" || l.External.IP != netip.MustParseAddr("172.30.0.200") {
		t.Errorf("external = %+v", l.External)
	}
	ns := l.Namespaces()
	if len(ns) != 2*3+2+1+1 || ns[len(ns)-1] != "t-ul" {
		t.Errorf("Namespaces() = %v", ns)
	}
	for _, name := range ns {
		rest, ok := strings.CutPrefix(name, "t-")
		if !ok || !nameRE.MatchString(rest) {
			t.Errorf("namespace %s would not be found by DestroyPrefix", name)
		}
		if !l.hasNS(name) {
			t.Errorf("hasNS(%s) = false", name)
		}
	}
	for _, name := range []string{"", "t", "t-n3", "other-ul", "t-n1-p4"} {
		if l.hasNS(name) {
			t.Errorf("hasNS(%q) = true", name)
		}
	}
}

// TestDestroyPrefixPattern checks that DestroyPrefix's name pattern does not
// reach into labs whose prefix extends another's.
func TestDestroyPrefixPattern(t *testing.T) {
	others := describe(Spec{Prefix: "gvs-n1", Nodes: 2, PodsPerNode: 2, External: true}.WithDefaults()).Namespaces()
	others = append(others, describe(Spec{Prefix: "gvs-demo", Nodes: 2, PodsPerNode: 2}.WithDefaults()).Namespaces()...)
	for _, name := range others {
		if rest, ok := strings.CutPrefix(name, "gvs-"); ok && nameRE.MatchString(rest) {
			t.Errorf("DestroyPrefix(gvs) would remove %s", name)
		}
	}
	for _, name := range describe(Spec{Prefix: "gvs", Nodes: 2, PodsPerNode: 2}.WithDefaults()).Namespaces() {
		if rest, ok := strings.CutPrefix(name, "gvs-n1-"); ok && nameRE.MatchString(rest) {
			t.Errorf("DestroyPrefix(gvs-n1) would remove %s", name)
		}
	}
}

func TestParseStat(t *testing.T) {
	line := []byte("1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1 2 3\n")
	st, state, err := parseStat(line)
	if err != nil || st != 98765 || state != 'S' {
		t.Fatalf("parseStat = %d %c %v", st, state, err)
	}
	if _, _, err := parseStat([]byte("1 (x) S 1")); err == nil {
		t.Error("short line accepted")
	}
	own, err := startTime(os.Getpid())
	if err != nil || own == 0 {
		t.Fatalf("startTime(self) = %d, %v", own, err)
	}
}

func TestLabJSON(t *testing.T) {
	l := describe(Spec{Prefix: "t", Nodes: 3, PodsPerNode: 1, External: true}.WithDefaults())
	b, err := l.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var got Lab
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec, l.Spec) || !reflect.DeepEqual(got.Nodes, l.Nodes) || *got.External != *l.External {
		t.Errorf("round trip:\n%s", b)
	}
	if got.Spec.Nodes != 3 || !got.Spec.External {
		t.Errorf("Spec fields hidden by Lab fields were lost: %+v", got.Spec)
	}
}
