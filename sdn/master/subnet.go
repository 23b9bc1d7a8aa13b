// Package master holds gvs-master's allocation logic: node subnets carved
// out of the cluster networks (with OpenShift's octet rotation rule) and
// project VNIDs. It is pure logic with no I/O; sdn/registry persists its
// results in etcd with compare-and-swap transactions.
package master

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrExhausted is returned when every subnet (or VNID) is in use.
var ErrExhausted = errors.New("no free subnet")

// ErrNotInNetwork is returned when a subnet does not belong to any of the
// allocator's cluster networks or is not aligned on a host subnet.
var ErrNotInNetwork = errors.New("subnet is not a host subnet of the cluster networks")

// ClusterNetwork is one cluster network and the number of host bits of
// each node subnet carved out of it.
type ClusterNetwork struct {
	CIDR             netip.Prefix `json:"cidr"`
	HostSubnetLength int          `json:"hostSubnetLength"`
}

// String formats the network as CIDR/H.
func (c ClusterNetwork) String() string { return fmt.Sprintf("%s(H=%d)", c.CIDR, c.HostSubnetLength) }

// networkAllocator allocates host subnets of one cluster network.
type networkAllocator struct {
	base      uint32 // network address
	prefixLen int
	hostBits  uint
	subBits   uint
	rot       uint // left rotation of the index within subBits (0: none)
	used      []bool
	inUse     int
	next      uint32 // cursor: index the next scan starts at
}

func newNetworkAllocator(cn ClusterNetwork) (*networkAllocator, error) {
	p := cn.CIDR.Masked()
	if !p.IsValid() || !p.Addr().Is4() {
		return nil, fmt.Errorf("cluster network %v: only IPv4 networks are supported", cn.CIDR)
	}
	h := cn.HostSubnetLength
	if h < 2 || h > 32-p.Bits() {
		return nil, fmt.Errorf("cluster network %v: hostSubnetLength %d must be in 2..%d", p, h, 32-p.Bits())
	}
	s := 32 - p.Bits() - h
	if s > 24 {
		return nil, fmt.Errorf("cluster network %v: %d subnet bits is more than 24", p, s)
	}
	a := &networkAllocator{
		base:      u32(p.Addr()),
		prefixLen: p.Bits(),
		hostBits:  uint(h),
		subBits:   uint(s),
		used:      make([]bool, 1<<s),
	}
	// When host bits do not fill whole octets and the subnet bits run past
	// the octet they share with the host bits, rotate the index left by
	// L = 8 - H mod 8 so that subnets that are zero in the shared octet
	// come first (10.1.0.0/16, H=6: 10.1.0.0/26, 10.1.1.0/26, ...).
	if h%8 != 0 && (h-1)/8 != (h+s-1)/8 {
		a.rot = uint(8 - h%8)
	}
	return a, nil
}

func (a *networkAllocator) size() uint32 { return uint32(len(a.used)) }

// subnetOf maps an allocation index to its subnet.
func (a *networkAllocator) subnetOf(i uint32) netip.Prefix {
	r := i
	if a.rot != 0 {
		mask := uint32(1)<<a.subBits - 1
		r = (i<<a.rot | i>>(a.subBits-a.rot)) & mask
	}
	ip := a.base | r<<a.hostBits
	return netip.PrefixFrom(addr(ip), 32-int(a.hostBits))
}

// indexOf maps a subnet back to its allocation index.
func (a *networkAllocator) indexOf(p netip.Prefix) (uint32, bool) {
	if !p.Addr().Is4() || p.Bits() != 32-int(a.hostBits) || p.Masked() != p {
		return 0, false
	}
	ip := u32(p.Addr())
	if a.prefixLen > 0 && (ip^a.base)>>(32-a.prefixLen) != 0 {
		return 0, false
	}
	r := (ip - a.base) >> a.hostBits
	i := r
	if a.rot != 0 {
		mask := uint32(1)<<a.subBits - 1
		i = (r>>a.rot | r<<(a.subBits-a.rot)) & mask
	}
	return i, true
}

// SubnetAllocator allocates node subnets from one or more cluster networks,
// in the order they are listed. Each network scans from its cursor and wraps.
// It is not safe for concurrent use.
type SubnetAllocator struct {
	nets []*networkAllocator
	cns  []ClusterNetwork
}

// NewSubnetAllocator returns an allocator over the given cluster networks.
// Networks must not overlap.
func NewSubnetAllocator(networks []ClusterNetwork) (*SubnetAllocator, error) {
	if len(networks) == 0 {
		return nil, errors.New("no cluster network")
	}
	sa := &SubnetAllocator{cns: networks}
	for i, cn := range networks {
		na, err := newNetworkAllocator(cn)
		if err != nil {
			return nil, err
		}
		for _, o := range networks[:i] {
			if o.CIDR.Overlaps(cn.CIDR) {
				return nil, fmt.Errorf("cluster networks %v and %v overlap", o.CIDR, cn.CIDR)
			}
		}
		sa.nets = append(sa.nets, na)
	}
	return sa, nil
}

// Networks returns the allocator's cluster networks.
func (sa *SubnetAllocator) Networks() []ClusterNetwork { return sa.cns }

// Allocate returns the next free subnet, scanning each network from its
// cursor and wrapping; ErrExhausted when all are in use.
func (sa *SubnetAllocator) Allocate() (netip.Prefix, error) {
	for _, na := range sa.nets {
		n := na.size()
		if na.inUse == int(n) {
			continue
		}
		for k := uint32(0); k < n; k++ {
			i := (na.next + k) % n
			if !na.used[i] {
				na.used[i] = true
				na.inUse++
				na.next = (i + 1) % n
				return na.subnetOf(i), nil
			}
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w in cluster networks %v", ErrExhausted, sa.cns)
}

// MarkUsed records a subnet allocated elsewhere (rebuilding from the
// registry). It reports whether the subnet was free before.
func (sa *SubnetAllocator) MarkUsed(p netip.Prefix) (bool, error) {
	for _, na := range sa.nets {
		if i, ok := na.indexOf(p); ok {
			if na.used[i] {
				return false, nil
			}
			na.used[i] = true
			na.inUse++
			return true, nil
		}
	}
	return false, fmt.Errorf("%v: %w", p, ErrNotInNetwork)
}

// Release frees a subnet. Releasing a free subnet is not an error.
func (sa *SubnetAllocator) Release(p netip.Prefix) error {
	for _, na := range sa.nets {
		if i, ok := na.indexOf(p); ok {
			if na.used[i] {
				na.used[i] = false
				na.inUse--
			}
			return nil
		}
	}
	return fmt.Errorf("%v: %w", p, ErrNotInNetwork)
}

// Cursors returns each network's scan cursor (to persist it).
func (sa *SubnetAllocator) Cursors() []uint32 {
	out := make([]uint32, len(sa.nets))
	for i, na := range sa.nets {
		out[i] = na.next
	}
	return out
}

// SetCursors restores the scan cursors saved by Cursors; extra or
// out-of-range values are ignored.
func (sa *SubnetAllocator) SetCursors(c []uint32) {
	for i, v := range c {
		if i < len(sa.nets) && v < sa.nets[i].size() {
			sa.nets[i].next = v
		}
	}
}

// InUse returns the number of allocated subnets.
func (sa *SubnetAllocator) InUse() int {
	n := 0
	for _, na := range sa.nets {
		n += na.inUse
	}
	return n
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
