package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// NetnsDir is where named network namespaces are bind-mounted, as by
// `ip netns add`.
const NetnsDir = "/run/netns"

// NSPath returns the path of the named namespace name.
func NSPath(name string) string { return filepath.Join(NetnsDir, name) }

// ensureNetnsDir makes NetnsDir a shared mount point, as iproute2 does, so
// that namespaces created later are visible to processes that `ip netns
// exec` started earlier in their own mount namespace.
func ensureNetnsDir() error {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	for bound := false; ; bound = true {
		err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINVAL) || bound {
			return fmt.Errorf("lab: make %s shared: %w", NetnsDir, err)
		}
		// Not a mount point yet: bind it onto itself, then retry.
		if err := unix.Mount(NetnsDir, NetnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("lab: bind %s: %w", NetnsDir, err)
		}
	}
}

// createNamed creates the network namespace name and bind-mounts it at
// NSPath(name). The work runs on a locked OS thread that unshares into the
// new namespace and then returns to the original one; if it cannot return,
// the thread stays locked and is discarded when its goroutine ends.
// It fails with an error wrapping os.ErrExist if the name is taken.
func createNamed(name string) error {
	path := NSPath(name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("lab: create netns %s: %w", name, err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		mountErr := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, "")
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: the runtime ends it with this goroutine.
			errc <- errors.Join(mountErr, fmt.Errorf("restore netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		if mountErr != nil {
			mountErr = fmt.Errorf("bind mount: %w", mountErr)
		}
		errc <- mountErr
	}()
	if err := <-errc; err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("lab: create netns %s: %w", name, err)
	}
	return nil
}

// deleteNamed unmounts and removes the named namespace. A name that does not
// exist is not an error. The namespace itself goes away when no process or
// file descriptor holds it any more.
func deleteNamed(name string) error {
	path := NSPath(name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("lab: unmount netns %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("lab: remove netns %s: %w", name, err)
	}
	return nil
}

// exists reports whether a named namespace name exists.
func exists(name string) bool {
	_, err := os.Lstat(NSPath(name))
	return err == nil
}
