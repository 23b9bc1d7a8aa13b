package tap

import "golang.org/x/sys/unix"

// SetOffloadFunc replaces the TUNSETOFFLOAD call for a test and returns a
// function that restores it.
func SetOffloadFunc(f func(fd int, off uint) error) (restore func()) {
	old := setOffload
	setOffload = f
	return func() { setOffload = old }
}

// RealSetOffload is the real TUNSETOFFLOAD call.
func RealSetOffload(fd int, off uint) error {
	return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(off))
}
