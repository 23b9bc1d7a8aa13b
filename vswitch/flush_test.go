package vswitch

import (
	"slices"
	"testing"

	"github.com/gvswitch/gvs/port"
)

// TestSparseFirst: a batch's destinations are written fewest bytes first,
// each keeping its own frames; the order costs no allocation.
func TestSparseFirst(t *testing.T) {
	ports := []*portEntry{{no: 1}, {no: 2}, {no: 3}, {no: 4}}
	sizes := []int{64000, 98, 5000, 98}
	w := &worker{}
	for i, e := range ports {
		w.pend = append(w.pend, pending{
			e:     e,
			bufs:  [][]byte{make([]byte, sizes[i])},
			meta:  []port.Meta{{Size: sizes[i]}},
			bytes: sizes[i],
		})
	}
	w.nPend = len(ports)
	w.sparseFirst()
	var got []uint32
	for _, p := range w.pend[:w.nPend] {
		if len(p.bufs[0]) != p.bytes || p.meta[0].Size != p.bytes {
			t.Errorf("port %d: its frames moved apart from it (%d bytes queued, frame of %d)", p.e.no, p.bytes, len(p.bufs[0]))
		}
		got = append(got, uint32(p.e.no))
	}
	// Equal sizes keep their order (ports 2 and 4).
	if want := []uint32{2, 4, 3, 1}; !slices.Equal(got, want) {
		t.Errorf("write order %v, want %v", got, want)
	}
	if allocs := testing.AllocsPerRun(100, w.sparseFirst); allocs != 0 {
		t.Errorf("sparseFirst: %v allocs, want 0", allocs)
	}
}
