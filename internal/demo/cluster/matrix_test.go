package cluster

import (
	"strings"
	"testing"
)

func TestMatrixString(t *testing.T) {
	m := Matrix{
		Pods: []Pod{{Project: "alpha", Node: "n1"}, {Project: "beta", Node: "n2"}},
		OK:   [][]bool{{false, false}, {true, false}},
	}
	want := strings.Join([]string{
		"from \\ to  alpha/n1 beta/n2 ",
		"alpha/n1   -        BLOCKED ",
		"beta/n2    ok       -       ",
		""}, "\n")
	if got := m.String(); got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}
