// Package nstest gives sdn's root-only tests throwaway named network
// namespaces and a way to run code inside them on a locked OS thread.
package nstest

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RequireRoot skips the test unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
}

// New creates the named network namespace "gvst-<pkg>-<pid>-<suffix>"
// (bind-mounted at /run/netns, so `ip netns exec` works) and removes it when
// the test ends, even if it fails. The calling goroutine's namespace is left
// as it was.
func New(t testing.TB, pkg, suffix string) string {
	t.Helper()
	name := fmt.Sprintf("gvst-%s-%d-%s", pkg, os.Getpid(), suffix)
	_ = netns.DeleteNamed(name) // left over from a crashed run of this pid
	err := onLockedThread(func() error {
		h, err := netns.NewNamed(name) // moves this thread into it
		if err != nil {
			return err
		}
		return h.Close()
	})
	if err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	return name
}

// Do runs fn on a locked OS thread inside the named namespace. The thread
// goes back to its original namespace afterwards; if that fails it stays
// locked, so the runtime discards it instead of reusing it.
func Do(name string, fn func() error) error {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer ns.Close()
	return onLockedThread(func() error {
		if err := unix.Setns(int(ns), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter netns %s: %w", name, err)
		}
		return fn()
	})
}

// onLockedThread runs fn on a fresh goroutine locked to its thread, with the
// thread's network namespace saved before and restored after.
func onLockedThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		ferr := fn()
		if err := unix.Setns(int(orig), unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: it exits with the goroutine.
			errc <- fmt.Errorf("restore netns: %w (after %v)", err, ferr)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
