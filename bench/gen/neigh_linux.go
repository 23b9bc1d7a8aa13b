package gen

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// neighTimeout bounds how long resolve waits for ARP.
const neighTimeout = 2 * time.Second

// resolve finds, in the calling thread's network namespace, the source
// address of the route to dst out of ifc and, if wantMAC, the MAC address of
// its next hop (the gateway, or dst itself on a link route). When the
// neighbour table has no usable entry it sends one UDP datagram to dst's
// discard port to make the kernel resolve it, and waits up to neighTimeout.
func resolve(ifc *net.Interface, dst netip.Addr, wantMAC bool) (netip.Addr, net.HardwareAddr, error) {
	routes, err := netlink.RouteGetWithOptions(dst.AsSlice(), &netlink.RouteGetOptions{OifIndex: ifc.Index})
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("gen: blast: no route to %v via %s: %w", dst, ifc.Name, err)
	}
	if len(routes) == 0 {
		return netip.Addr{}, nil, fmt.Errorf("gen: blast: no route to %v via %s", dst, ifc.Name)
	}
	rt := routes[0]
	src, ok := netip.AddrFromSlice(rt.Src)
	if !ok {
		return netip.Addr{}, nil, fmt.Errorf("gen: blast: route to %v via %s has no source address", dst, ifc.Name)
	}
	src = src.Unmap()
	if !wantMAC {
		return src, nil, nil
	}
	hop := dst
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok && gw.Unmap().IsValid() && !gw.Unmap().IsUnspecified() {
		hop = gw.Unmap()
	}
	deadline := time.Now().Add(neighTimeout)
	for triggered := false; ; {
		if mac := neighbour(ifc.Index, hop); mac != nil {
			return src, mac, nil
		}
		if time.Now().After(deadline) {
			return netip.Addr{}, nil, fmt.Errorf("gen: blast: no ARP reply from next hop %v on %s within %v (give -dst-mac)", hop, ifc.Name, neighTimeout)
		}
		if !triggered {
			triggered = true
			if c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9))); err == nil {
				_, _ = c.Write([]byte("gvs-bench arp"))
				c.Close()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// neighbour returns the MAC address of ip in the neighbour table of link
// index, or nil if there is no usable entry.
func neighbour(index int, ip netip.Addr) net.HardwareAddr {
	ns, err := netlink.NeighList(index, netlink.FAMILY_V4)
	if err != nil {
		return nil
	}
	const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, n := range ns {
		a, ok := netip.AddrFromSlice(n.IP)
		if ok && a.Unmap() == ip && n.State&usable != 0 && len(n.HardwareAddr) == 6 {
			return n.HardwareAddr
		}
	}
	return nil
}
