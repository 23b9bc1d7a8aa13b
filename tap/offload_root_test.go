package tap_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/tap"
	"golang.org/x/sys/unix"
)

// TestOffloadsWithoutUSO plays a kernel before 6.2, which refuses the USO
// bits of TUNSETOFFLOAD with EINVAL: Create must retry without them and
// report the offloads in effect, ProbeUSO must say no, and an EINVAL for
// the other bits must still fail Create.
func TestOffloadsWithoutUSO(t *testing.T) {
	needRoot(t)
	_, path := testNS(t, "uso")
	var calls []uint
	restore := tap.SetOffloadFunc(func(fd int, off uint) error {
		calls = append(calls, off)
		if off&tap.OffloadsUSO != 0 {
			return unix.EINVAL
		}
		return tap.RealSetOffload(fd, off)
	})
	t.Cleanup(restore)
	dev := createIn(t, path, tap.Config{Offloads: tap.OffloadsTSO | tap.OffloadsUSO})
	if got := dev.Offloads(); got != tap.OffloadsTSO {
		t.Errorf("offloads %#x, want %#x (TSO without USO)", got, tap.OffloadsTSO)
	}
	if len(calls) != 2 || calls[0] != tap.OffloadsTSO|tap.OffloadsUSO || calls[1] != tap.OffloadsTSO {
		t.Errorf("TUNSETOFFLOAD calls %#x", calls)
	}
	var ok bool
	if err := netconf.Do(path, func() (err error) { ok, err = tap.ProbeUSO(); return }); err != nil || ok {
		t.Errorf("ProbeUSO on a kernel without USO: %v, %v", ok, err)
	}

	tap.SetOffloadFunc(func(int, uint) error { return unix.EINVAL })
	err := netconf.Do(path, func() error {
		d, err := tap.Create(tap.Config{Offloads: tap.OffloadsTSO})
		if err == nil {
			d.Close()
		}
		return err
	})
	if !errors.Is(err, unix.EINVAL) {
		t.Errorf("Create with TSO refused: %v, want EINVAL", err)
	}
}

// TestOffloadsUSO: on a kernel with USO (6.2+) a TAP gets it.
func TestOffloadsUSO(t *testing.T) {
	needRoot(t)
	_, path := testNS(t, "uso2")
	dev := createIn(t, path, tap.Config{Offloads: tap.OffloadsTSO | tap.OffloadsUSO})
	var ok bool
	if err := netconf.Do(path, func() (err error) { ok, err = tap.ProbeUSO(); return }); err != nil {
		t.Fatal(err)
	}
	if ok != (dev.Offloads()&tap.OffloadsUSO == tap.OffloadsUSO) {
		t.Errorf("ProbeUSO %v but a TAP got offloads %#x", ok, dev.Offloads())
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err == nil && (major > 6 || major == 6 && minor >= 2) && !ok {
		t.Errorf("kernel %d.%d has USO on TAPs, but ProbeUSO says no", major, minor)
	}
}
