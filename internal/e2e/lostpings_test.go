package e2e

import "testing"

// TestLostPings: the gaps between the first reply and the highest are
// counted, in any order and with duplicates; the edges are not.
func TestLostPings(t *testing.T) {
	for _, c := range []struct {
		seqs       []int
		lost, span int
	}{
		{nil, 0, 0},
		{[]int{7}, 0, 1},
		{[]int{3, 4, 5, 6}, 0, 4},
		{[]int{3, 5, 9}, 4, 7},
		{[]int{3, 6, 4, 4, 8}, 2, 6},
	} {
		if lost, span := lostPings(c.seqs); lost != c.lost || span != c.span {
			t.Errorf("lostPings(%v) = %d of %d, want %d of %d", c.seqs, lost, span, c.lost, c.span)
		}
	}
}
