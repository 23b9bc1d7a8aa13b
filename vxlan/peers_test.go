package vxlan

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
)

func TestPeers(t *testing.T) {
	var p Peers // zero value is usable
	if p.Contains([4]byte{192, 0, 2, 1}) || p.Len() != 0 || p.List() != nil {
		t.Fatal("zero Peers not empty")
	}
	a, b, c := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("198.51.100.9")
	if err := p.Set([]netip.Addr{c, a, a}); err != nil {
		t.Fatal(err)
	}
	if !p.Contains(a.As4()) || !p.Contains(c.As4()) || p.Contains(b.As4()) || p.Len() != 2 {
		t.Fatalf("after Set: %v", p.List())
	}
	if err := p.Add(netip.MustParseAddr("::ffff:192.0.2.2")); err != nil {
		t.Fatal(err)
	}
	if got, want := p.List(), []netip.Addr{a, b, c}; !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	p.Remove(a)
	p.Remove(a)
	p.Remove(netip.MustParseAddr("2001:db8::1"))
	if got, want := p.List(), []netip.Addr{b, c}; !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	if err := p.Add(netip.MustParseAddr("2001:db8::1")); !errors.Is(err, ErrNotIPv4) {
		t.Errorf("Add(IPv6) = %v", err)
	}
	if err := p.Set([]netip.Addr{a, {}}); !errors.Is(err, ErrNotIPv4) {
		t.Errorf("Set(invalid) = %v", err)
	}
	if p.Len() != 2 {
		t.Error("failed Set changed the set")
	}
	if _, err := NewPeers(netip.Addr{}); err == nil {
		t.Error("NewPeers(invalid) succeeded")
	}
}

func TestPeersConcurrent(t *testing.T) {
	p, _ := NewPeers()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					p.Contains([4]byte{10, 0, 0, 7})
				}
			}
		})
	}
	for i := range 1000 {
		p.Add(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
	}
	close(stop)
	wg.Wait()
	if p.Len() != 1000 {
		t.Errorf("Len = %d", p.Len())
	}
}
