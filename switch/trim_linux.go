package vswitch

import (
	"syscall"
	"unsafe"
)

// releasePages gives the whole pages inside b back to the kernel
// (MADV_DONTNEED): they read as zeros when touched again. b is a frame
// buffer, a pointer-free allocation of its own, so nothing of the Go
// runtime lives in those pages.
func releasePages(b []byte) {
	const page = 4096
	if len(b) < 2*page {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	first := (start + page - 1) &^ (page - 1)
	last := (start + uintptr(len(b))) &^ (page - 1)
	if last <= first {
		return
	}
	_ = syscall.Madvise(b[first-start:last-start], syscall.MADV_DONTNEED)
}
