package vswitch

import (
	"sync"

	"github.com/gvswitch/gvs/port"
)

// Frame buffers live outside Go's heap where the platform allows it
// (slab_linux.go): a worker's 72 buffers of 64 KiB are ≈ 4.7 MB of address
// space, of which an idle pod touches a page or two. On Go's heap that
// address space counts as live heap, so a node with 250 pods had a
// ≈ 1.7 GB heap goal: the GC almost never ran, the garbage of the control
// plane stayed resident, and the scavenger, which keeps memory up to the
// heap goal, returned none of it. Outside the heap the GC sees only real
// objects. Each worker's buffers are one slab (a mapping); a slab goes back
// to the switch's free list when its port's workers have ended, with its
// pages released, and is reused by the next port of the same shape.

// slab is one worker's buffers: n buffers of size bytes in one mapping.
type slab struct {
	mem  []byte // the whole mapping; nil for buffers on Go's heap
	bufs [][]byte
}

// slabs is the switch's free list of slabs, by shape.
type slabs struct {
	mu   sync.Mutex
	free map[[2]int][]*slab
}

// get returns a slab of n buffers of size bytes: a free one of that shape
// or a new one.
func (p *slabs) get(n, size int) *slab {
	p.mu.Lock()
	if l := p.free[[2]int{n, size}]; len(l) > 0 {
		sl := l[len(l)-1]
		p.free[[2]int{n, size}] = l[:len(l)-1]
		p.mu.Unlock()
		return sl
	}
	p.mu.Unlock()
	return newSlab(n, size)
}

// put takes back sl, whose buffers nobody uses any more, giving its pages
// back to the system; put(nil) does nothing.
func (p *slabs) put(sl *slab) {
	if sl == nil || sl.mem == nil {
		return
	}
	port.ReleasePages(sl.mem)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = map[[2]int][]*slab{}
	}
	k := [2]int{len(sl.bufs), len(sl.bufs[0])}
	p.free[k] = append(p.free[k], sl)
}

// close unmaps the free slabs (Switch.Close, once every worker has ended).
func (p *slabs) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.free {
		for _, sl := range l {
			sl.unmap()
		}
	}
	p.free = nil
}

// heapSlab is a slab on Go's heap: where mapping fails, and off Linux.
func heapSlab(n, size int) *slab {
	sl := &slab{bufs: make([][]byte, n)}
	for i := range sl.bufs {
		sl.bufs[i] = make([]byte, size)
	}
	return sl
}
