package vhost

import (
	"errors"
	"os"
	"testing"
)

// TestProbe checks that Probe agrees with the machine: where the device
// node is missing it must refuse with ErrUnavailable and say why; where it
// exists (as root) it must report VIRTIO_F_VERSION_1, which every
// vhost-net since Linux 4.0 offers.
func TestProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (/dev/vhost-net is root-only)")
	}
	f, err := Probe()
	if !deviceExists() {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("no %s, Probe: %#x, %v; want ErrUnavailable", DevicePath, f, err)
		}
		t.Logf("vhost-net unavailable here, as expected: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("%s exists, Probe: %v", DevicePath, err)
	}
	if f&FeatureVersion1 == 0 {
		t.Errorf("features %#x lack VIRTIO_F_VERSION_1", f)
	}
	t.Logf("vhost-net features %#x", f)
}
