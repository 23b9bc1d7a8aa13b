//go:build !linux

package vswitch

// releasePages does nothing outside Linux.
func releasePages([]byte) {}
