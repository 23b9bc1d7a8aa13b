package cluster

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/lab"
)

// reachMatrix is two pods of different VNIDs: the rule blocks both ways,
// pod 2 reached pod 1 anyway.
func reachMatrix() Matrix {
	return Matrix{
		Pods: []Pod{
			{Pod: lab.Pod{Name: "n1-p1", NS: "gvs-demo-n1-p1", Project: "alpha"}, IP: netip.MustParseAddr("10.128.0.2"), VNID: 10},
			{Pod: lab.Pod{Name: "n2-p1", NS: "gvs-demo-n2-p1", Project: "beta"}, IP: netip.MustParseAddr("10.128.2.2"), VNID: 11},
		},
		Got:  [][]bool{{true, false}, {true, true}},
		Want: [][]bool{{true, false}, {false, true}},
	}
}

func TestMatrixPrint(t *testing.T) {
	var b bytes.Buffer
	reachMatrix().Print(&b)
	want := strings.Join([]string{
		`from \ to                  #1     #2`,
		`#1  n1-p1/alpha             .     --   10.128.0.2 vnid=10`,
		`#2  n2-p1/beta            ok!      .   10.128.2.2 vnid=11`,
		``}, "\n")
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestMatrixMismatches(t *testing.T) {
	got := reachMatrix().Mismatches()
	want := []string{"n2-p1 (beta, VNID 11) → n1-p1 (alpha, VNID 10): reached=true, rule says false"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestShortName(t *testing.T) {
	for in, want := range map[string]string{"gvs-demo-n1-p2": "n1-p2", "n2-p1": "n2-p1", "ext": "ext"} {
		if got := shortName(in); got != want {
			t.Errorf("shortName(%q) = %q, want %q", in, got, want)
		}
	}
}
