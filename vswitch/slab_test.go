package vswitch

import (
	"testing"
	"unsafe"

	"github.com/gvswitch/gvs/flowtable"
)

// A port's worker buffers come from a slab that goes back to the switch
// when the port is removed and serves the next port of the same shape;
// on Linux the slab is a mapping of its own, outside Go's heap, each
// buffer starting on a page.
func TestSlabsReused(t *testing.T) {
	sw, err := New(Config{Table: flowtable.New(flowtable.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	first := func(no uint32) *slab {
		t.Helper()
		if err := sw.AddPort(no, newMemPort("p")); err != nil {
			t.Fatal(err)
		}
		e := (*sw.ports.Load())[no]
		w := e.workers[0]
		if len(w.bufs) != 8 || len(w.spare) != spareBuffers || len(w.slab.bufs) != len(w.bufs)+len(w.spare) {
			t.Fatalf("%d buffers and %d spare from a slab of %d", len(w.bufs), len(w.spare), len(w.slab.bufs))
		}
		for _, b := range append(append([][]byte(nil), w.bufs...), w.spare...) {
			if len(b) != Headroom+sw.frameSize() || cap(b) != len(b) {
				t.Fatalf("a buffer of %d bytes (capacity %d)", len(b), cap(b))
			}
		}
		return w.slab
	}
	a := first(1)
	if slabsMapped && (a.mem == nil || uintptr(unsafe.Pointer(unsafe.SliceData(a.bufs[1])))%4096 != 0) {
		t.Error("the slab is not a mapping of page-aligned buffers")
	}
	if err := sw.RemovePort(1); err != nil {
		t.Fatal(err)
	}
	if b := first(2); slabsMapped && b != a {
		t.Error("the next port of the same shape got a new slab")
	}
	if c := first(3); c == a {
		t.Error("two ports share a slab")
	}
}
