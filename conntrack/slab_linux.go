//go:build linux

package conntrack

import (
	"runtime"
	"syscall"
	"unsafe"
)

// hugeMin is the smallest slab worth mapping with transparent huge pages.
const hugeMin = 8 << 20

// allocSlab returns storage for n entries and m chain heads. A large
// table is mapped outside the Go heap and advised to use transparent
// huge pages (madvise MADV_HUGEPAGE): its lookups land at random across
// it, and with 4 KiB pages each would also miss the TLB. The entries and
// heads hold no pointers, so the garbage collector need not see them;
// the mapping is released when t becomes unreachable.
func (t *Tracker) allocSlab(n, m int) ([]entry, []atomicU32) {
	es, bs := n*int(entrySize), m*4
	if es+bs < hugeMin {
		return make([]entry, n), make([]atomicU32, m)
	}
	const huge = 2 << 20
	size := (es + bs + huge - 1) &^ (huge - 1)
	mem, err := syscall.Mmap(-1, 0, size+huge, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return make([]entry, n), make([]atomicU32, m)
	}
	off := int((huge - uintptr(unsafe.Pointer(&mem[0]))%huge) % huge)
	_ = syscall.Madvise(mem[off:off+size], 14) // MADV_HUGEPAGE; without THP it is a no-op
	base := unsafe.Pointer(&mem[off])
	entries := unsafe.Slice((*entry)(base), n)
	buckets := unsafe.Slice((*atomicU32)(unsafe.Add(base, es)), m)
	runtime.AddCleanup(t, func(mem []byte) { _ = syscall.Munmap(mem) }, mem)
	t.mapped = len(mem)
	return entries, buckets
}
