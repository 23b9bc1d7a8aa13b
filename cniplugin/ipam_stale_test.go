package cniplugin

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// The node moves to another subnet: its leases become stale (CHECK fails
// naming the reason, DEL drops them, a new ADD gets an address of the new
// subnet), and the stale records survive reopening the IPAM.
func TestResubnetMakesLeasesStale(t *testing.T) {
	s, fb, sock := newTestServer(t, "10.128.0.0/29")
	for _, id := range []string{"c1", "c2"} {
		if r := call(t, sock, "ADD", id, testConf); r.Error != nil {
			t.Fatal(r.Error)
		}
	}
	// Lost, no new subnet yet: ADD is "try again later".
	st, err := s.IPAM().Resubnet(netip.Prefix{}, "subnet 10.128.0.0/29 went to node n4")
	if err != nil || len(st) != 2 {
		t.Fatalf("Resubnet: %v %v", st, err)
	}
	clear(fb.attached) // the daemon detaches the pods of a lost subnet
	if r := call(t, sock, "ADD", "c3", testConf); code(r) != types.ErrTryAgainLater {
		t.Errorf("ADD with no subnet: %+v, want code 11", r.Error)
	}
	if _, err := s.IPAM().Resubnet(netip.MustParsePrefix("10.128.0.8/29"), "other"); err != nil {
		t.Fatal(err)
	}
	r := call(t, sock, "CHECK", "c1", testConf)
	if code(r) != ErrCodeCheckFailed || !strings.Contains(r.Error.Details, "went to node n4") ||
		!strings.Contains(r.Error.Details, "10.128.0.2") {
		t.Errorf("CHECK of a stale pod: %+v", r.Error)
	}
	if r := call(t, sock, "ADD", "c3", testConf); r.Error != nil || !strings.Contains(string(r.Result), "10.128.0.10/") {
		t.Errorf("ADD after the change: %+v %s", r.Error, r.Result)
	}
	if r := call(t, sock, "DEL", "c1", testConf); r.Error != nil {
		t.Fatal(r.Error)
	}
	if _, ok := s.IPAM().Stale("c1", "eth0"); ok {
		t.Error("DEL kept the stale record")
	}
	if r := call(t, sock, "CHECK", "c1", testConf); code(r) != types.ErrUnknownContainer {
		t.Errorf("CHECK after DEL: %+v", r.Error)
	}
	// Re-ADD of a stale attachment replaces its stale record.
	if r := call(t, sock, "ADD", "c2", testConf); r.Error != nil {
		t.Fatal(r.Error)
	}
	if _, ok := s.IPAM().Stale("c2", "eth0"); ok {
		t.Error("ADD kept the stale record")
	}
}

// Leases outside the subnet found when the IPAM opens (the subnet changed
// while the daemon was down) become stale, and stale records are reloaded.
func TestOpenIPAMStale(t *testing.T) {
	dir := t.TempDir()
	m, err := OpenIPAM(dir, netip.MustParsePrefix("10.128.0.0/29"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allocate(Lease{ContainerID: "c1", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	m2, err := OpenIPAM(dir, netip.MustParsePrefix("10.128.0.8/29"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := m2.Stale("c1", "eth0")
	if !ok || st.IP != netip.MustParseAddr("10.128.0.2") || !strings.Contains(st.Reason, "outside") || len(m2.Leases()) != 0 {
		t.Fatalf("stale %+v %v, leases %v", st, ok, m2.Leases())
	}
	if _, err := os.Stat(filepath.Join(dir, "stale", staleFileName(&st.Lease))); err != nil || !strings.HasPrefix(staleFileName(&st.Lease), "10.128.0.2_") {
		t.Error(err)
	}
	m3, err := OpenIPAM(dir, netip.MustParsePrefix("10.128.0.8/29"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m3.Stale("c1", "eth0"); !ok {
		t.Error("stale record not reloaded")
	}
}

// The node's subnet changes while a DEL detaches the pod (the daemon's
// ChangeSubnet runs between DEL's lease lookup and its release): the DEL
// must not leave the lease behind as a stale record.
func TestDelRacingResubnet(t *testing.T) {
	s, fb, sock := newTestServer(t, "10.128.0.0/29")
	if r := call(t, sock, "ADD", "c1", testConf); r.Error != nil {
		t.Fatal(r.Error)
	}
	fb.onDetach = func() {
		fb.onDetach = nil
		if _, err := s.IPAM().Resubnet(netip.MustParsePrefix("10.128.0.8/29"), "moved"); err != nil {
			t.Error(err)
		}
	}
	if r := call(t, sock, "DEL", "c1", testConf); r.Error != nil {
		t.Fatal(r.Error)
	}
	if st, ok := s.IPAM().Stale("c1", "eth0"); ok {
		t.Errorf("DEL left a stale record: %+v", st)
	}
	if r := call(t, sock, "CHECK", "c1", testConf); code(r) != types.ErrUnknownContainer {
		t.Errorf("CHECK after DEL: %+v, want unknown container", r.Error)
	}
}

// Two attachments that had the same address in turn (the node lost its
// subnet, got it back, and gave the address to a new pod before the first
// pod was deleted) both go stale: each keeps its own record on disk, and
// dropping one leaves the other.
func TestStaleSameAddressTwice(t *testing.T) {
	dir := t.TempDir()
	a, b := netip.MustParsePrefix("10.128.0.0/29"), netip.MustParsePrefix("10.128.0.8/29")
	m, err := OpenIPAM(dir, a, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"x", "y"} {
		l, err := m.Allocate(Lease{ContainerID: id, IfName: "eth0"})
		if err != nil || l.IP != netip.MustParseAddr("10.128.0.2") {
			t.Fatalf("%s: %v %v, want 10.128.0.2", id, l.IP, err)
		}
		if _, err := m.Resubnet(b, "lost "+id); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Resubnet(a, "back"); err != nil {
			t.Fatal(err)
		}
	}
	reopen := func() *IPAM {
		t.Helper()
		m, err := OpenIPAM(dir, a, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m = reopen()
	for _, id := range []string{"x", "y"} {
		if st, ok := m.Stale(id, "eth0"); !ok || st.Reason != "lost "+id {
			t.Errorf("after reopening, stale record of %s: %+v %v", id, st, ok)
		}
	}
	if err := m.DropStale("x", "eth0"); err != nil {
		t.Fatal(err)
	}
	m = reopen()
	if _, ok := m.Stale("x", "eth0"); ok {
		t.Error("x's stale record came back")
	}
	if _, ok := m.Stale("y", "eth0"); !ok {
		t.Error("dropping x's stale record removed y's")
	}
}
