package tap

// Persistent TAPs let a pod's interface outlive the process that serves it:
// gvs-switchd creates each CNI pod's TAP persistent (TUNSETPERSIST 1), so
// when the daemon exits (upgrade, restart, crash) its fds close but the
// pod's eth0 stays, with its address and routes. The next daemon attaches
// to it again with Reopen. While no fd is attached the kernel drops what
// the pod sends (tun_net_xmit finds no queue) and reports no carrier.

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrNotPersistent is returned by Reopen when the interface is a TAP that
// was not left persistent, or whose flags differ from the ones gvs opens
// TAPs with (so it is not one gvs left behind).
var ErrNotPersistent = errors.New("tap: not a persistent gvs TAP")

// wantFlags are the TUNGETIFF flags of a TAP made by Create.
const wantFlags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR

// CreatePersistent is Create followed by SetPersist(true): the TAP stays
// when its fds close, until Destroy (or until its network namespace goes
// away). If setting the flag fails the device is closed, so nothing is
// left behind.
func CreatePersistent(cfg Config) (*Device, error) {
	d, err := Create(cfg)
	if err != nil {
		return nil, err
	}
	if err := d.SetPersist(true); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Reopen attaches to a persistent TAP left by an earlier process in the
// calling thread's network namespace, under its current name cfg.Name
// (inside a pod: the pod's interface name). TUNSETIFF re-applies the flags
// IFF_TAP|IFF_NO_PI|IFF_VNET_HDR (and IFF_MULTI_QUEUE as cfg says; a
// mismatch there fails), and the header size, the header byte order
// (TUNSETVNETLE) and cfg.Offloads (TUNSETOFFLOAD) are set again as Create
// sets them. TUNGETIFF then must report those flags and IFF_PERSIST;
// otherwise Reopen detaches and fails with ErrNotPersistent, leaving the
// device as it was. An interface that is no TAP, or whose IFF_MULTI_QUEUE
// differs, fails with ErrNotPersistent too. It fails with ErrNotFound if there is no such
// interface. The device stays persistent.
func Reopen(cfg Config) (*Device, error) {
	d, err := Open(cfg)
	if errors.Is(err, unix.EINVAL) {
		// TUNSETIFF refuses a name that is not a TAP (a veth, a TUN) or
		// whose IFF_MULTI_QUEUE differs.
		return nil, fmt.Errorf("%w: %w", ErrNotPersistent, err)
	}
	if err != nil {
		return nil, err
	}
	flags, err := d.flags()
	if err != nil {
		d.Close()
		return nil, err
	}
	want := uint16(wantFlags | unix.IFF_PERSIST)
	if cfg.MultiQueue {
		want |= unix.IFF_MULTI_QUEUE
	}
	if flags&want != want {
		d.Close()
		return nil, fmt.Errorf("tap %s: %w: flags %#x, want %#x", cfg.Name, ErrNotPersistent, flags, want)
	}
	return d, nil
}

// flags returns the device's TUNGETIFF flags.
func (d *Device) flags() (uint16, error) {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return 0, err
	}
	err = d.control(func(fd int) error { return unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr) })
	if err != nil {
		return 0, fmt.Errorf("tap %s: TUNGETIFF: %w", d.name, err)
	}
	return ifr.Uint16(), nil
}

// Persistent reports whether the device is persistent (TUNGETIFF reports
// IFF_PERSIST).
func (d *Device) Persistent() (bool, error) {
	f, err := d.flags()
	return f&unix.IFF_PERSIST != 0, err
}

// Destroy clears the persistent flag and closes the queue, so that the
// interface disappears with its last queue. A device the kernel has
// already removed (its namespace was deleted) is only closed.
func (d *Device) Destroy() error {
	if d.closed.Load() {
		return ErrClosed
	}
	perr := d.SetPersist(false)
	if errors.Is(perr, unix.EBADFD) {
		perr = nil // detached: the interface is gone already
	}
	return errors.Join(perr, d.Close())
}

// DeletePersistent removes the persistent TAP name from the calling
// thread's network namespace, for cleanups that hold no fd of it: it
// attaches to it (Reopen, as a single-queue TAP, else as a multi-queue
// one), then Destroys it. A missing interface is not an error; an
// interface that is not a persistent gvs TAP is left alone and reported
// with ErrNotPersistent. A single-queue TAP that a process holds fails to
// attach (EBUSY); a multi-queue one does not, so check that none of its
// queues is attached before (netlink's IFLA_TUN_NUM_QUEUES).
func DeletePersistent(name string) error {
	d, err := Reopen(Config{Name: name})
	if errors.Is(err, unix.EINVAL) {
		// Not a TAP, or a multi-queue one.
		d, err = Reopen(Config{Name: name, MultiQueue: true})
	}
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return d.Destroy()
}

// ProbeUSO reports whether the kernel offers UDP segmentation offload on
// TAPs (TUN_F_USO4|6, Linux 6.2 and later), and so takes UDP super-frames
// written with a GSOUDPL4 header. It creates a TAP with a name the kernel
// chooses in the calling thread's network namespace and closes it at once.
func ProbeUSO() (bool, error) {
	d, err := Create(Config{Offloads: OffloadsTSO | OffloadsUSO})
	if err != nil {
		return false, err
	}
	defer d.Close()
	return d.Offloads()&OffloadsUSO == OffloadsUSO, nil
}
