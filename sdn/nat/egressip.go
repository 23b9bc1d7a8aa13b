package nat

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The host side of the egress IPs a node hosts (sdn/egressip.go explains
// the whole path). The switch hands a hosted VNID's outbound traffic to
// tun0 addressed to the VNID's egress MAC (sdn.EgressMAC); two nftables tables of their own
// turn that into a source NAT to the VNID's egress IP:
//
//	table netdev gvs-egress {
//		chain ingress {
//			type filter hook ingress device tun0 priority filter; policy accept;
//			ether daddr EgressMAC(v) ip daddr != C… ip daddr != S meta mark set EgressMark(v) meta pkttype set host
//			(one rule per hosted egress IP)
//		}
//	}
//	table ip gvs-egress {
//		chain postrouting {
//			type nat hook postrouting priority srcnat - 10; policy accept;
//			meta mark EgressMark(v) ip saddr C snat to EIP
//			(one rule per hosted egress IP and cluster network C)
//		}
//		chain input {
//			type filter hook input priority filter; policy accept;
//			ip daddr EIP ct state new drop
//			(one rule per hosted egress IP: it is no way into the node)
//		}
//	}
//
// A frame addressed to an egress MAC no rule admits stays PACKET_OTHERHOST
// and the kernel drops it: a VNID whose egress IP this node does not (or
// no longer) host is never masqueraded with the node's own address. The
// postrouting chain runs before "ip gvs" (srcnat), so a marked packet
// takes the egress IP, not the masquerade.
//
// The egress IPs themselves are secondary addresses of the underlay link
// (the one that holds the node IP), labelled "<link>:eip", so that the
// node answers ARP for them and a restarted daemon finds (and removes)
// the ones it no longer hosts.

// EgressTable names the two nftables tables of the egress IPs (families
// netdev and ip).
const EgressTable = "gvs-egress"

// EgressIP is an egress IP this node hosts, the destination MAC the
// switch gives the outbound traffic that is to leave from it, and the
// packet mark the host gives that traffic (sdn.EgressMAC and
// sdn.EgressMark of its VNID; this package does not know VNIDs).
type EgressIP struct {
	IP   netip.Addr
	MAC  [6]byte
	Mark uint32
}

// EnsureEgressIPs makes the current network namespace source-NAT the
// outbound traffic of exactly the VNIDs of ips, arriving on link tun
// addressed to their egress MACs, to their egress IPs; traffic to the
// cluster networks or the service network is never taken. It replaces both
// tables in one netlink transaction; with no ips it removes them.
func EnsureEgressIPs(tun string, clusterNets []netip.Prefix, serviceNet netip.Prefix, ips []EgressIP) error {
	if len(clusterNets) == 0 {
		return fmt.Errorf("%w: none given", ErrInvalidNetwork)
	}
	for _, cn := range append(slices.Clone(clusterNets), serviceNet) {
		if !cn.IsValid() || !cn.Addr().Unmap().Is4() || cn.Bits() == 0 {
			return fmt.Errorf("%w: %v", ErrInvalidNetwork, cn)
		}
	}
	for _, e := range ips {
		if !e.IP.Unmap().Is4() || e.Mark == 0 || e.MAC[0]&1 != 0 {
			return fmt.Errorf("%w: egress IP %v with MAC %x, mark %#x", ErrInvalidNetwork, e.IP, e.MAC, e.Mark)
		}
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nat: netlink: %w", err)
	}
	ingress := &nftables.Table{Family: nftables.TableFamilyNetdev, Name: EgressTable}
	snat := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: EgressTable}
	for _, t := range []*nftables.Table{ingress, snat} {
		c.AddTable(t)
		c.DelTable(t)
	}
	if len(ips) > 0 {
		c.AddTable(ingress)
		c.AddTable(snat)
		in := c.AddChain(&nftables.Chain{Name: "ingress", Table: ingress, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookIngress, Priority: nftables.ChainPriorityFilter, Device: tun})
		prio := *nftables.ChainPriorityNATSource - 10
		post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: snat, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: &prio})
		input := c.AddChain(&nftables.Chain{Name: "input", Table: snat, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter})
		for _, e := range ips {
			c.AddRule(&nftables.Rule{Table: ingress, Chain: in, Exprs: admitExprs(e, clusterNets, serviceNet)})
			for _, cn := range clusterNets {
				c.AddRule(&nftables.Rule{Table: snat, Chain: post, Exprs: snatExprs(e, cn)})
			}
			c.AddRule(&nftables.Rule{Table: snat, Chain: input, Exprs: refuseNewExprs(e.IP)})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nat: install the egress IP tables: %w", err)
	}
	return nil
}

// admitExprs builds "ether type ip ether daddr e.MAC ip daddr != each of
// C… and S meta mark set e.Mark meta pkttype set host".
func admitExprs(eip EgressIP, clusterNets []netip.Prefix, serviceNet netip.Prefix) []expr.Any {
	mac := eip.MAC
	e := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(unix.ETH_P_IP)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 6},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: mac[:]},
	}
	for _, cn := range append(slices.Clone(clusterNets), serviceNet) {
		e = append(e, prefixMatch(offIPv4Dst, cn, expr.CmpOpNeq)...)
	}
	return append(e,
		&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(eip.Mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		&expr.Immediate{Register: 1, Data: []byte{unix.PACKET_HOST}},
		&expr.Meta{Key: expr.MetaKeyPKTTYPE, SourceRegister: true, Register: 1},
		&expr.Counter{},
	)
}

// snatExprs builds "meta mark e.Mark ip saddr cn snat to e.IP".
func snatExprs(e EgressIP, cn netip.Prefix) []expr.Any {
	ip := e.IP.Unmap().As4()
	x := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(e.Mark)},
	}
	x = append(x, prefixMatch(offIPv4Src, cn, expr.CmpOpEq)...)
	return append(x,
		&expr.Counter{},
		&expr.Immediate{Register: 1, Data: ip[:]},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1},
	)
}

// refuseNewExprs builds "ip daddr ip ct state new drop": an egress IP
// is no way into the node (OpenShift SDN rejects new connections to it
// too); the replies of the connections that leave from it pass.
func refuseNewExprs(ip netip.Addr) []expr.Any {
	e := prefixMatch(offIPv4Dst, netip.PrefixFrom(ip.Unmap(), 32), expr.CmpOpEq)
	return append(e,
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop},
	)
}

// ErrNoUnderlay means no link of the namespace holds the node IP.
var ErrNoUnderlay = errors.New("nat: no link holds the node IP")

// underlayLink returns the link holding nodeIP and its prefix there.
func underlayLink(nodeIP netip.Addr) (netlink.Link, int, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, 0, fmt.Errorf("nat: list addresses: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == nodeIP.Unmap() {
			l, err := netlink.LinkByIndex(a.LinkIndex)
			if err != nil {
				return nil, 0, fmt.Errorf("nat: link of %v: %w", nodeIP, err)
			}
			bits, _ := a.Mask.Size()
			return l, bits, nil
		}
	}
	return nil, 0, fmt.Errorf("%w %v", ErrNoUnderlay, nodeIP)
}

// EgressLabel returns the address label of the egress IPs on link: the
// link's name and ":eip" (an address label must start with the link name
// and be at most 15 bytes).
func EgressLabel(link string) (string, error) {
	l := link + ":eip"
	if len(l) > 15 {
		return "", fmt.Errorf("%w: link name %q is too long to label egress IPs", ErrInvalidNetwork, link)
	}
	return l, nil
}

// SetEgressAddresses makes the egress IPs on the underlay link (the one
// holding nodeIP, with its prefix length) exactly ips: missing ones are
// added, each announced with a gratuitous ARP, labelled ones not in ips
// removed. The node then answers ARP for them. Addresses it added are found again by their label after a restart.
func SetEgressAddresses(nodeIP netip.Addr, ips []netip.Addr) error {
	l, bits, err := underlayLink(nodeIP)
	if err != nil {
		return err
	}
	label, err := EgressLabel(l.Attrs().Name)
	if err != nil {
		return err
	}
	have, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("nat: list addresses of %s: %w", l.Attrs().Name, err)
	}
	var errs []error
	present := map[netip.Addr]bool{}
	for _, a := range have {
		ip, _ := netip.AddrFromSlice(a.IP)
		ip = ip.Unmap()
		if a.Label != label {
			continue
		}
		if slices.Contains(ips, ip) {
			present[ip] = true
			continue
		}
		if err := netlink.AddrDel(l, &a); err != nil {
			errs = append(errs, fmt.Errorf("nat: remove egress IP %v: %w", ip, err))
		}
	}
	for _, ip := range ips {
		if present[ip.Unmap()] {
			continue
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(ip.Unmap().AsSlice()), Mask: net.CIDRMask(bits, 32)}, Label: label}
		if err := netlink.AddrAdd(l, a); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("nat: add egress IP %v to %s: %w", ip, l.Attrs().Name, err))
			continue
		}
		errs = append(errs, announce(l, ip.Unmap()))
	}
	return errors.Join(errs...)
}

// announce sends one gratuitous ARP request for ip from link (RFC 5227
// section 3: sender and target address both ip, to the broadcast
// address), so that the hosts of the underlay update their caches at once
// when an egress IP moves here, instead of when their entry for the old
// node expires.
func announce(l netlink.Link, ip netip.Addr) error {
	mac := l.Attrs().HardwareAddr
	if len(mac) != 6 {
		return fmt.Errorf("nat: %s has no Ethernet address", l.Attrs().Name)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("nat: packet socket: %w", err)
	}
	defer unix.Close(fd)
	a := ip.As4()
	f := make([]byte, 0, 42)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	f = append(f, mac...)
	f = append(f, 0x08, 0x06)             // ARP
	f = append(f, 0, 1, 8, 0, 6, 4, 0, 1) // Ethernet, IPv4, request
	f = append(f, mac...)
	f = append(f, a[:]...)
	f = append(f, 0, 0, 0, 0, 0, 0)
	f = append(f, a[:]...)
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: l.Attrs().Index, Halen: 6}
	copy(sa.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if err := unix.Sendto(fd, f, 0, sa); err != nil {
		return fmt.Errorf("nat: gratuitous ARP for %v on %s: %w", ip, l.Attrs().Name, err)
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
