//go:build !linux

package vswitch

// newSlab allocates the buffers on Go's heap outside Linux.
func newSlab(n, size int) *slab { return heapSlab(n, size) }

func (sl *slab) unmap() {}

// slabsMapped: newSlab maps its buffers (tests).
const slabsMapped = false
