package tap_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/tap"
	"golang.org/x/sys/unix"
)

// TestPersistentReopen: a persistent TAP outlives its fd with its
// address; Reopen attaches again with the vnet header and offloads set up
// and traffic flows; a non-persistent TAP is refused and left alone;
// Destroy and DeletePersistent remove the interface.
func TestPersistentReopen(t *testing.T) {
	needRoot(t)
	_, nsPath := testNS(t, "pr")
	cfg := tap.Config{Name: "gvst-pp", Offloads: tap.OffloadsTSO}
	err := netconf.Do(nsPath, func() error {
		if _, err := tap.Reopen(tap.Config{Name: "gvst-none"}); !errors.Is(err, tap.ErrNotFound) {
			return fmt.Errorf("Reopen of a missing TAP: %v, want ErrNotFound", err)
		}
		d, err := tap.CreatePersistent(cfg)
		if err != nil {
			return err
		}
		if p, err := d.Persistent(); err != nil || !p {
			return fmt.Errorf("Persistent after CreatePersistent: %v %v", p, err)
		}
		return d.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	// The interface survived its fd, and keeps its configuration.
	err = netconf.ConfigureLink(nsPath, netconf.LinkConfig{Name: "gvst-pp", NewName: "eth9", MAC: kernelMAC[:],
		MTU: 1500, Up: true})
	if err != nil {
		t.Fatalf("configure the orphaned TAP: %v", err)
	}
	var dev *tap.Device
	err = netconf.Do(nsPath, func() (err error) {
		cfg.Name = "eth9" // reopened under its current name
		dev, err = tap.Reopen(cfg)
		return err
	})
	if err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	if hdrsz, err := unix.IoctlGetInt(dev.Fd(), unix.TUNGETVNETHDRSZ); err != nil || hdrsz != tap.VnetHdrLen {
		t.Errorf("vnet header size after Reopen: %d %v, want %d", hdrsz, err, tap.VnetHdrLen)
	}
	if dev.Name() != "eth9" {
		t.Errorf("Name = %q", dev.Name())
	}
	// A frame written to the reopened TAP reaches the namespace's stack:
	// ARP for its address gets an answer read back through the device.
	if err := netconf.ConfigureLink(nsPath, netconf.LinkConfig{Name: "eth9", Addrs: []netip.Prefix{netip.PrefixFrom(kernelIP, 24)}}); err != nil {
		t.Fatal(err)
	}
	bufs, _ := newBufs(1)
	req := arpFrame(bufs[0], 1, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if _, err := dev.Write([][]byte{req}, sized([][]byte{req}), headroom); err != nil {
		t.Fatal(err)
	}
	readFrame(t, dev, "ARP reply on the reopened TAP", func(f []byte) bool {
		return len(f) >= 42 && f[12] == 0x08 && f[13] == 0x06 && f[21] == 2
	})
	// A second Reopen while the first holds the single queue fails.
	err = netconf.Do(nsPath, func() error { _, err := tap.Reopen(cfg); return err })
	if err == nil {
		t.Error("second Reopen of a single-queue TAP in use succeeded")
	}
	if err := dev.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := dev.Destroy(); !errors.Is(err, tap.ErrClosed) {
		t.Errorf("second Destroy: %v, want ErrClosed", err)
	}
	linkGone(t, nsPath, "eth9")

	err = netconf.Do(nsPath, func() error {
		// Not persistent: one queue of a multi-queue TAP held by someone
		// else. Reopen refuses it and the device stays.
		q0, err := tap.Create(tap.Config{Name: "gvst-np", MultiQueue: true})
		if err != nil {
			return err
		}
		defer q0.Close()
		if _, err := tap.Reopen(tap.Config{Name: "gvst-np", MultiQueue: true}); !errors.Is(err, tap.ErrNotPersistent) {
			return fmt.Errorf("Reopen of a non-persistent TAP: %v, want ErrNotPersistent", err)
		}
		if err := tap.DeletePersistent("gvst-np"); !errors.Is(err, tap.ErrNotPersistent) {
			return fmt.Errorf("DeletePersistent of a non-persistent TAP: %v, want ErrNotPersistent", err)
		}
		if _, err := net.InterfaceByName("gvst-np"); err != nil {
			return fmt.Errorf("the refused TAP is gone: %v", err)
		}
		// DeletePersistent without an fd; a missing name is not an error.
		d, err := tap.CreatePersistent(tap.Config{Name: "gvst-dp"})
		if err != nil {
			return err
		}
		d.Close()
		if err := tap.DeletePersistent("gvst-dp"); err != nil {
			return fmt.Errorf("DeletePersistent: %w", err)
		}
		if _, err := net.InterfaceByName("gvst-dp"); err == nil {
			return errors.New("gvst-dp outlived DeletePersistent")
		}
		// A persistent multi-queue TAP whose queues are all closed.
		mq, err := tap.CreatePersistent(tap.Config{Name: "gvst-mp", MultiQueue: true})
		if err != nil {
			return err
		}
		q1, err := tap.Open(tap.Config{Name: "gvst-mp", MultiQueue: true})
		if err != nil {
			mq.Destroy()
			return err
		}
		q1.Close()
		mq.Close()
		if _, err := net.InterfaceByName("gvst-mp"); err != nil {
			return fmt.Errorf("the persistent multi-queue TAP is gone: %v", err)
		}
		if err := tap.DeletePersistent("gvst-mp"); err != nil {
			return fmt.Errorf("DeletePersistent of a multi-queue TAP: %w", err)
		}
		if _, err := net.InterfaceByName("gvst-mp"); err == nil {
			return errors.New("gvst-mp outlived DeletePersistent")
		}
		return tap.DeletePersistent("gvst-dp")
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPersistentNamespaceGone: a persistent TAP moved into a namespace
// dies with it, and Destroy of its now detached fd succeeds (the TAP
// pool's case: the fd is opened in the node namespace).
func TestPersistentNamespaceGone(t *testing.T) {
	needRoot(t)
	_, home := testNS(t, "gh")
	podName := fmt.Sprintf("gvst-tap-%d-gp", os.Getpid())
	podPath, err := netconf.CreateNamedNS(podName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netconf.DeleteNamedNS(podName) }) // normally gone already
	var dev *tap.Device
	err = netconf.Do(home, func() (err error) {
		if dev, err = tap.CreatePersistent(tap.Config{Name: "gvst-g0"}); err != nil {
			return err
		}
		return netconf.MoveToNS("gvst-g0", podPath)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	if err := netconf.DeleteNamedNS(podName); err != nil {
		t.Fatal(err)
	}
	// The namespace is cleaned up asynchronously; the fd detaches then.
	testutil.WaitFor(t, 10*time.Second, "the TAP to go with its namespace", func() (bool, error) {
		_, err := dev.Persistent()
		return errors.Is(err, unix.EBADFD), err
	})
	if err := dev.Destroy(); err != nil {
		t.Errorf("Destroy of a detached TAP: %v", err)
	}
}

func linkGone(t *testing.T, nsPath, name string) {
	t.Helper()
	err := netconf.Do(nsPath, func() error {
		if _, err := net.InterfaceByName(name); err == nil {
			return fmt.Errorf("%s still exists", name)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
