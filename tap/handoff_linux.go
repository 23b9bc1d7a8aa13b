package tap

import (
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"
)

// FromFd makes a Device of fd, a queue of a TAP that another Device
// attached, possibly in another process which sent the descriptor over a
// unix socket (SCM_RIGHTS; gvs-switchd's live upgrade). The queue keeps
// its attachment and the frames queued in it; TUNGETIFF must report
// IFF_TAP|IFF_NO_PI|IFF_VNET_HDR, and the header size, byte order and
// cfg.Offloads are set again as Create sets them (cfg.Name and
// cfg.MultiQueue are not used: the device's own apply). The Device owns
// fd from now on, also when FromFd fails (it is closed then). The
// sender's descriptor refers to the same open file: it may close it at
// any time without detaching the queue, but must not read it while the
// Device does.
func FromFd(fd int, cfg Config) (*Device, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d, err := fromFd(fd, cfg, log)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return d, nil
}

func fromFd(fd int, cfg Config, log *slog.Logger) (*Device, error) {
	if fd < 0 {
		return nil, errors.New("tap: from fd: negative descriptor")
	}
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return nil, err
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		return nil, fmt.Errorf("tap: from fd %d: TUNGETIFF: %w", fd, err)
	}
	name := ifr.Name()
	if f := ifr.Uint16(); f&wantFlags != wantFlags {
		return nil, fmt.Errorf("tap %s: from fd: %w: flags %#x, want %#x", name, ErrNotPersistent, f, wantFlags)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("tap %s: from fd: %w", name, err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, VnetHdrLen); err != nil {
		return nil, fmt.Errorf("tap %s: TUNSETVNETHDRSZ: %w", name, err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETLE, 1); err != nil && !hostLittleEndian() {
		return nil, fmt.Errorf("tap %s: TUNSETVNETLE: %w", name, err)
	}
	off := cfg.Offloads
	err = setOffload(fd, off)
	if errors.Is(err, unix.EINVAL) && off&OffloadsUSO != 0 {
		off &^= OffloadsUSO
		err = setOffload(fd, off)
	}
	if err != nil {
		return nil, fmt.Errorf("tap %s: TUNSETOFFLOAD %#x: %w", name, off, err)
	}
	batch := cfg.BatchSize
	if batch == 0 {
		batch = DefaultBatchSize
	}
	d := &Device{name: name, fd: fd, batch: batch, log: log, offloads: off}
	d.readFn = d.readRaw
	if err := d.SetPolled(true); err != nil {
		return nil, err
	}
	log.Debug("tap taken over", "name", name, "offloads", off)
	return d, nil
}
