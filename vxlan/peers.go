package vxlan

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
)

// ErrNotIPv4 is returned by Peers.Set and Peers.Add for an address that is
// not IPv4 (IPv4-mapped IPv6 addresses are accepted and unmapped).
var ErrNotIPv4 = errors.New("vxlan: peer address is not IPv4")

// Peers is the set of known nodes' underlay IPv4 addresses; the tunnel port
// accepts VXLAN packets only from them (docs/architecture.md, a packet's
// way).
//
// Readers (Contains) take no lock and allocate nothing: the set is an
// immutable map published through an atomic.Pointer. Writers (Set, Add,
// Remove) copy the set under a mutex and publish the copy; they are meant for
// control-plane rates, not per packet. The zero value is an empty set ready
// to use. A Peers must not be copied after first use.
type Peers struct {
	mu  sync.Mutex // serializes writers
	set atomic.Pointer[map[[4]byte]struct{}]
}

// NewPeers returns a set holding addrs.
func NewPeers(addrs ...netip.Addr) (*Peers, error) {
	p := new(Peers)
	if err := p.Set(addrs); err != nil {
		return nil, err
	}
	return p, nil
}

// Contains reports whether a is a known peer. It is safe to call
// concurrently with writers and allocates nothing.
func (p *Peers) Contains(a [4]byte) bool {
	m := p.set.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[a]
	return ok
}

// Set replaces the whole set with addrs. If any address is not IPv4 it
// returns an error wrapping ErrNotIPv4 and leaves the set unchanged.
func (p *Peers) Set(addrs []netip.Addr) error {
	m := make(map[[4]byte]struct{}, len(addrs))
	for _, a := range addrs {
		k, err := key(a)
		if err != nil {
			return err
		}
		m[k] = struct{}{}
	}
	p.mu.Lock()
	p.set.Store(&m)
	p.mu.Unlock()
	return nil
}

// Add adds a to the set. It returns an error wrapping ErrNotIPv4 if a is not
// IPv4.
func (p *Peers) Add(a netip.Addr) error {
	k, err := key(a)
	if err != nil {
		return err
	}
	p.update(func(m map[[4]byte]struct{}) { m[k] = struct{}{} })
	return nil
}

// Remove removes a from the set; removing an absent address does nothing.
func (p *Peers) Remove(a netip.Addr) {
	k, err := key(a)
	if err != nil {
		return
	}
	p.update(func(m map[[4]byte]struct{}) { delete(m, k) })
}

// List returns the peers in ascending order, as a new slice.
func (p *Peers) List() []netip.Addr {
	m := p.set.Load()
	if m == nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(*m))
	for k := range *m {
		out = append(out, netip.AddrFrom4(k))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Len returns the number of peers.
func (p *Peers) Len() int {
	m := p.set.Load()
	if m == nil {
		return 0
	}
	return len(*m)
}

// update copies the current set, applies fn to the copy and publishes it.
func (p *Peers) update(fn func(map[[4]byte]struct{})) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var m map[[4]byte]struct{}
	if old := p.set.Load(); old != nil {
		m = make(map[[4]byte]struct{}, len(*old)+1)
		for k := range *old {
			m[k] = struct{}{}
		}
	} else {
		m = make(map[[4]byte]struct{}, 1)
	}
	fn(m)
	p.set.Store(&m)
}

func key(a netip.Addr) ([4]byte, error) {
	a = a.Unmap()
	if !a.Is4() {
		return [4]byte{}, fmt.Errorf("%w: %v", ErrNotIPv4, a)
	}
	return a.As4(), nil
}
