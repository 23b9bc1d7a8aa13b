package vswitch

import "syscall"

// newSlab maps n buffers of size bytes, each starting on a page boundary
// (so that releasing one buffer's pages never touches its neighbours'),
// outside Go's heap. The mapping is pointer-free memory the GC never
// scans; untouched pages cost nothing. Where the mapping fails, the
// buffers are allocated on the heap.
func newSlab(n, size int) *slab {
	const page = 4096
	stride := (size + page - 1) &^ (page - 1)
	mem, err := syscall.Mmap(-1, 0, n*stride, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return heapSlab(n, size)
	}
	sl := &slab{mem: mem, bufs: make([][]byte, n)}
	for i := range sl.bufs {
		sl.bufs[i] = mem[i*stride : i*stride+size : i*stride+size]
	}
	return sl
}

func (sl *slab) unmap() {
	if sl.mem != nil {
		_ = syscall.Munmap(sl.mem)
		sl.mem, sl.bufs = nil, nil
	}
}

// slabsMapped: newSlab maps its buffers (tests).
const slabsMapped = true
