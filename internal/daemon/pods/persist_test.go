package pods

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/gvswitch/gvs/packet"
	vswitch "github.com/gvswitch/gvs/vswitch"
	"github.com/vishvananda/netlink"
)

// A DEL whose namespace file outlived its namespace (unmounted, not
// removed: a runtime that crashed in its teardown) has no TAP to remove and
// must succeed, not fail on entering a namespace that is not there.
func TestRemoveLeftoverTAPNamespaceGone(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cni-1234")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"", filepath.Join(dir, "missing"), file, dir} {
		if err := removeLeftoverTAP(ns, "eth0", netip.MustParseAddr("10.128.0.2")); err != nil {
			t.Errorf("netns %q: %v", ns, err)
		}
	}
	if !isNetns("/proc/self/ns/net") {
		t.Error("/proc/self/ns/net is not recognized as a network namespace")
	}
}

// TestOurTAP: the checks made before adopting or deleting a pod's TAP,
// multi-queue TAPs included: one that a process holds (queues attached or
// detached) is never ours.
func TestOurTAP(t *testing.T) {
	ip := netip.MustParseAddr("10.128.0.5")
	mac := packet.PodMAC(ip.As4())
	good := func() *netlink.Tuntap {
		tt := &netlink.Tuntap{Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_NO_PI}
		tt.HardwareAddr = net.HardwareAddr(mac[:])
		return tt
	}
	cases := []struct {
		name string
		mod  func(*netlink.Tuntap)
		ok   bool
	}{
		{"single-queue", func(*netlink.Tuntap) {}, true},
		{"multi-queue, no queue attached", func(tt *netlink.Tuntap) { tt.Flags |= netlink.TUNTAP_MULTI_QUEUE }, true},
		{"multi-queue, held", func(tt *netlink.Tuntap) { tt.Flags |= netlink.TUNTAP_MULTI_QUEUE; tt.Queues = 2 }, false},
		{"multi-queue, a detached queue held", func(tt *netlink.Tuntap) {
			tt.Flags |= netlink.TUNTAP_MULTI_QUEUE
			tt.DisabledQueues = 1
		}, false},
		{"not persistent", func(tt *netlink.Tuntap) { tt.NonPersist = true }, false},
		{"no vnet_hdr", func(tt *netlink.Tuntap) { tt.Flags = netlink.TUNTAP_NO_PI }, false},
		{"another MAC", func(tt *netlink.Tuntap) { tt.HardwareAddr = net.HardwareAddr{0x0a, 0x58, 1, 2, 3, 4} }, false},
		{"a TUN", func(tt *netlink.Tuntap) { tt.Mode = netlink.TUNTAP_MODE_TUN }, false},
	}
	for _, c := range cases {
		tt := good()
		c.mod(tt)
		if ok, why := ourTAP(tt, ip); ok != c.ok {
			t.Errorf("%s: ourTAP = %v (%s), want %v", c.name, ok, why, c.ok)
		}
	}
	if ok, _ := ourTAP(&netlink.Veth{}, ip); ok {
		t.Error("a veth is ours")
	}
}

// holdingIO is a tapIO that holds resources (vswitch.Holder) while held.
type holdingIO struct {
	tapIO
	held bool
}

func (h *holdingIO) Holds() bool { return h.held }

// plainIO is a tapIO without Holds.
type plainIO struct{ tapIO }

// A CNI pod's TAP, wrapped for the switch, still tells the switch whether
// its engine holds rings (so that idle trimming wakes it to give them up):
// the wrapper forwards vswitch.Holder, and says false for an engine
// without it.
func TestPodTAPForwardsHolder(t *testing.T) {
	h := &holdingIO{held: true}
	var q vswitch.Port = &podTAP{tapIO: h}
	hq, ok := q.(vswitch.Holder)
	if !ok {
		t.Fatal("a pod TAP is not a vswitch.Holder")
	}
	if !hq.Holds() {
		t.Error("Holds false while the engine holds")
	}
	h.held = false
	if hq.Holds() {
		t.Error("Holds true while the engine holds nothing")
	}
	if (&podTAP{tapIO: plainIO{}}).Holds() {
		t.Error("Holds true for an engine that is no Holder")
	}
}
