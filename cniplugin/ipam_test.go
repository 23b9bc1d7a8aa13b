package cniplugin

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

func TestIPAMAllocatePersistRelease(t *testing.T) {
	dir := t.TempDir()
	sub := netip.MustParsePrefix("10.128.2.0/29") // .2 .. .6 usable
	m, err := OpenIPAM(dir, sub, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []Lease
	for i := range 5 {
		l, err := m.Allocate(Lease{ContainerID: fmt.Sprint("c", i), IfName: "eth0", Netns: "/x"})
		if err != nil {
			t.Fatalf("allocate %d: %v", i, err)
		}
		got = append(got, l)
	}
	if got[0].IP != netip.MustParseAddr("10.128.2.2") || got[4].IP != netip.MustParseAddr("10.128.2.6") {
		t.Errorf("addresses %v .. %v, want .2 .. .6", got[0].IP, got[4].IP)
	}
	if got[0].Port != 1000 || got[4].Port != 1004 {
		t.Errorf("ports %d .. %d, want 1000 .. 1004", got[0].Port, got[4].Port)
	}
	_, err = m.Allocate(Lease{ContainerID: "c5", IfName: "eth0"})
	if !errors.Is(err, ErrSubnetExhausted) {
		t.Fatalf("6th allocation: %v, want ErrSubnetExhausted", err)
	}
	if _, err := m.Allocate(Lease{ContainerID: "c1", IfName: "eth0"}); err == nil {
		t.Error("a second lease for c1/eth0 was allowed")
	}
	if err := m.Release("c1", "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := m.Release("c1", "eth0"); err != nil {
		t.Errorf("second release: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "10.128.2.3.json")); !os.IsNotExist(err) {
		t.Errorf("lease file of a released address: %v", err)
	}

	// A restart keeps every lease, with its port.
	m2, err := OpenIPAM(dir, sub, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m2.Leases()); n != 4 {
		t.Fatalf("after reopen: %d leases, want 4", n)
	}
	l, ok := m2.Get("c4", "eth0")
	if !ok || l != got[4] {
		t.Errorf("c4 after reopen = %+v, want %+v", l, got[4])
	}
	l, err = m2.Allocate(Lease{ContainerID: "new", IfName: "eth0"})
	if err != nil || l.IP != netip.MustParseAddr("10.128.2.3") || l.Port != 1001 {
		t.Errorf("allocate after reopen = %v %d %v, want the freed .3 and port 1001", l.IP, l.Port, err)
	}
}

func TestIPAMIgnoresBadFiles(t *testing.T) {
	dir := t.TempDir()
	sub := netip.MustParsePrefix("10.128.2.0/24")
	os.WriteFile(filepath.Join(dir, "10.128.2.9.json"), []byte("{not json"), 0o644)
	os.WriteFile(filepath.Join(dir, "10.0.0.5.json"), []byte(`{"containerID":"a","ifName":"eth0","ip":"10.0.0.5","port":1000}`), 0o644)
	os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("x"), 0o644)
	m, err := OpenIPAM(dir, sub, 1000)
	if m == nil || err == nil {
		t.Fatalf("OpenIPAM = %v, %v; want the IPAM and an error naming the bad files", m, err)
	}
	if len(m.Leases()) != 0 {
		t.Errorf("leases %v, want none", m.Leases())
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-123")); !os.IsNotExist(err) {
		t.Error("an interrupted write was not cleaned up")
	}
	if _, err := OpenIPAM(dir, netip.MustParsePrefix("10.128.2.0/31"), 1000); err == nil {
		t.Error("a /31 subnet was accepted")
	}
}

// A pod whose sandbox is made again (the old one DELeted first, as the
// kubelet does after a node reboot) gets the address it had, even across
// a daemon restart's fresh cursor; another pod does not get a released
// address at once (round robin); once another pod has it, it is no longer
// kept for the first.
func TestIPAMGivesAPodItsAddressBack(t *testing.T) {
	m, err := OpenIPAM(t.TempDir(), netip.MustParsePrefix("10.128.2.0/28"), 1000) // .2 .. .14
	if err != nil {
		t.Fatal(err)
	}
	alloc := func(id, pod string) netip.Addr {
		t.Helper()
		l, err := m.Allocate(Lease{ContainerID: id, IfName: "eth0", Project: "alpha", PodName: pod})
		if err != nil {
			t.Fatal(err)
		}
		return l.IP
	}
	release := func(id string) {
		t.Helper()
		if err := m.Release(id, "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	a, b := alloc("a1", "web-a"), alloc("b1", "web-b")
	release("a1")
	release("b1")
	m.cursor = m.subnet.Addr().Next() // as after a restart: the lowest free address comes next
	if got := alloc("b2", "web-b"); got != b {
		t.Errorf("web-b's new sandbox got %s, had %s", got, b)
	}
	if got := alloc("a2", "web-a"); got != a {
		t.Errorf("web-a's new sandbox got %s, had %s", got, a)
	}
	release("a2")
	if got := alloc("c1", "other"); got == a {
		t.Errorf("another pod got web-a's address %s at once", got)
	}
	if _, err := m.Allocate(Lease{ContainerID: "x", IfName: "eth0", Project: "beta", PodName: "web-a"}); err != nil {
		t.Fatal(err)
	} else if l, _ := m.Get("x", "eth0"); l.IP == a {
		t.Errorf("web-a of another project got alpha/web-a's address %s", a)
	}
	for range 20 { // the cursor comes round to a: another pod takes it
		l, err := m.Allocate(Lease{ContainerID: fmt.Sprint("f", len(m.byKey)), IfName: "eth0"})
		if err != nil {
			break
		}
		if l.IP == a {
			break
		}
	}
	if _, kept := m.released[a]; kept {
		t.Errorf("%s is leased to another pod but still kept for web-a", a)
	}
}
