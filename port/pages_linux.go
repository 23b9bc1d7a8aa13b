package port

import (
	"syscall"
	"unsafe"
)

// ReleasePages gives the whole pages inside b back to the operating system
// (MADV_DONTNEED): they read as zeros when touched again, and cost no
// memory until then. b must be a frame buffer, a pointer-free allocation
// or mapping of its own, so that nothing else lives in those pages (the
// parts of b in pages it shares with others are left alone). A buffer
// shorter than two pages is left as it is.
func ReleasePages(b []byte) {
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
