package compare

import (
	"slices"
	"testing"
)

// TestRunOrder checks the runs' orders of the dataplanes: each run holds
// every dataplane once, and over n runs each dataplane comes first once
// and, for an even n, follows each other one once.
func TestRunOrder(t *testing.T) {
	if got := runOrder(4, 1); !slices.Equal(got, []int{0, 1, 3, 2}) {
		t.Errorf("run 1: %v, want [0 1 3 2]", got)
	}
	if got := runOrder(2, 2); !slices.Equal(got, []int{1, 0}) {
		t.Errorf("2 dataplanes, run 2: %v, want [1 0]", got)
	}
	for _, n := range []int{1, 2, 3, 4} {
		first := map[int]int{}
		follows := map[[2]int]int{}
		for run := 1; run <= n; run++ {
			o := runOrder(n, run)
			s := slices.Clone(o)
			slices.Sort(s)
			for k := range s {
				if s[k] != k {
					t.Fatalf("n %d run %d: %v is not every dataplane once", n, run, o)
				}
			}
			first[o[0]]++
			for k := 1; k < n; k++ {
				follows[[2]int{o[k-1], o[k]}]++
			}
		}
		for d := range n {
			if first[d] != 1 {
				t.Errorf("n %d: dataplane %d first in %d of %d runs, want 1", n, d, first[d], n)
			}
		}
		if n%2 == 0 && len(follows) != n*(n-1) {
			t.Errorf("n %d: %d distinct (before, after) pairs over %d runs, want all %d once: %v", n, len(follows), n, n*(n-1), follows)
		}
	}
}
