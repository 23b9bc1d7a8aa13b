package cniplugin

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// reattachBackend is a fakeBackend that can adopt interfaces: adopt[key]
// is what Reattach returns for an attachment.
type reattachBackend struct {
	fakeBackend
	adopt    map[string]error
	reattach []string
}

func (r *reattachBackend) Reattach(_ context.Context, l Lease) error {
	r.reattach = append(r.reattach, l.Key())
	if err := r.adopt[l.Key()]; err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attached[l.Key()] = l
	return nil
}

// TestRestore: leases whose namespace exists are adopted; without an
// interface to adopt they are attached anew; other failures and vanished
// namespaces keep their leases; a plain Backend is re-attached with Attach.
func TestRestore(t *testing.T) {
	dir := t.TempDir()
	m, err := OpenIPAM(filepath.Join(dir, "ipam"), netip.MustParsePrefix("10.128.0.0/24"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	// A stand-in for /run/netns/<pod>: Restore only checks that it exists.
	ns := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, l := range []Lease{
		{ContainerID: "keep", IfName: "eth0", Netns: ns("keep")},
		{ContainerID: "notap", IfName: "eth0", Netns: ns("notap")},
		{ContainerID: "broken", IfName: "eth0", Netns: ns("broken")},
		{ContainerID: "gone", IfName: "eth0", Netns: filepath.Join(dir, "no-such-ns")},
	} {
		if _, err := m.Allocate(l); err != nil {
			t.Fatal(err)
		}
	}
	rb := &reattachBackend{fakeBackend: fakeBackend{attached: map[string]Lease{}},
		adopt: map[string]error{"notap/eth0": ErrNoInterface, "broken/eth0": errors.New("eth0 is a veth")}}
	st := NewServer(ServerConfig{IPAM: m, Backend: rb}).Restore(context.Background())
	if want := (RestoreStats{Adopted: 1, Recreated: 1, NetnsGone: 1, Failed: 1}); st != want {
		t.Errorf("Restore = %+v, want %+v", st, want)
	}
	if len(rb.reattach) != 3 {
		t.Errorf("Reattach called for %v, want the 3 leases whose netns exists", rb.reattach)
	}
	for key, want := range map[string]bool{"keep/eth0": true, "notap/eth0": true, "broken/eth0": false, "gone/eth0": false} {
		if _, ok := rb.attached[key]; ok != want {
			t.Errorf("%s attached = %v, want %v", key, ok, want)
		}
	}
	if n := len(m.Leases()); n != 4 {
		t.Errorf("%d leases after Restore, want all 4 kept", n)
	}

	// A Backend that cannot adopt: every lease with a namespace is
	// attached anew.
	fb := &fakeBackend{attached: map[string]Lease{}}
	st = NewServer(ServerConfig{IPAM: m, Backend: fb}).Restore(context.Background())
	if want := (RestoreStats{Recreated: 3, NetnsGone: 1}); st != want {
		t.Errorf("Restore without Reattacher = %+v, want %+v", st, want)
	}
}
