//go:build !linux

package port

// ReleasePages does nothing outside Linux: the buffers keep their pages.
func ReleasePages(b []byte) {}
