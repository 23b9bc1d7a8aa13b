package sdn

import (
	"fmt"
	"net/netip"

	"github.com/gvswitch/gvs/flowtable"
)

// Egress IPs (OpenShift's NetNamespace and HostSubnet egressIPs): every
// pod of a project leaves the cluster from one address, whatever node it
// runs on.
//
//  1. A node that hosts an egress IP of VNID v (EgressRoute.Local) sends
//     v's outbound traffic to tun0 addressed to EgressMAC(v) instead of
//     tun0's own MAC: the host's ingress hook (sdn/nat EgressIPs) admits
//     exactly the hosted MACs, marks the packet EgressMark(v), and the
//     host source-NATs marked traffic to the egress IP. It also accepts
//     v's outbound traffic from the other nodes' tunnels (table 0,
//     tun_id=v), and only v's: the VNID the tunnel carries picks the mark.
//  2. Another node sends v's outbound traffic through VXLAN, with VNI v, to
//     the hosting node (EgressRoute.Via).
//  3. A VNID with egress IPs none of which a reachable node hosts has its
//     outbound traffic dropped (fail closed), never masqueraded with the
//     node's own address.
//
// Every other tun0 output of table 101 (the default) rewrites eth_dst to
// tun0's MAC, so a pod cannot pick a mark by addressing its frame to an
// egress MAC itself.

// EgressRoute is how a node sends the outbound traffic of one VNID with
// egress IPs: through this node's host (Local, SNAT to IP), through the
// tunnel to the node Via that hosts IP, or nowhere (neither: dropped).
type EgressRoute struct {
	IP    netip.Addr // the egress IP serving the VNID (invalid: none)
	Local bool       // this node hosts IP
	Via   netip.Addr // the underlay address of the remote node hosting IP
}

// EgressIPCookie returns the cookie of the egress IP rules of VNID v
// (tables 0 and 101).
func EgressIPCookie(v uint32) uint64 { return cookieClassEgressIP | uint64(v&MaxVNID) }

// EgressMAC returns the destination MAC address the switch gives VNID v's
// outbound traffic on its way into tun0 on the node that hosts v's egress
// IP: 0a:59:00 followed by the 24 bits of v. The host's ingress hook
// recognises it (and only for the VNIDs it hosts).
func EgressMAC(v uint32) [6]byte {
	v &= MaxVNID
	return [6]byte{0x0a, 0x59, 0x00, byte(v >> 16), byte(v >> 8), byte(v)}
}

// EgressMACPrefix is the first three bytes every EgressMAC shares.
var EgressMACPrefix = [3]byte{0x0a, 0x59, 0x00}

// Packet mark bits other users of the node's namespace own: kube-proxy's
// masquerade (0x4000) and drop (0x8000) bits, as OpenShift SDN avoids them.
const (
	kubeMasqueradeBit = 1 << 14
	kubeDropBit       = 1 << 15
)

// EgressMark returns the packet mark the host gives VNID v's outbound
// traffic for the source NAT to its egress IP: never 0, never with
// kube-proxy's 0x4000 or 0x8000 bits, distinct for every VNID (OpenShift
// SDN's getMarkForVNID with masqueradeBit 14).
func EgressMark(v uint32) uint32 {
	v &= MaxVNID
	if v == 0 {
		v = 0xff000000
	}
	if v&kubeDropBit != 0 {
		v = (v | 0x10000000) ^ kubeDropBit
	}
	if v&kubeMasqueradeBit != 0 {
		v = (v | 0x01000000) ^ kubeMasqueradeBit
	}
	return v
}

// CheckEgressIP reports whether ip can be an egress IP under cfg: an
// IPv4 unicast address outside the cluster, service and multicast
// networks and not the node's own address. Errors wrap ErrInvalidConfig.
func (c NodeConfig) CheckEgressIP(ip netip.Addr) error {
	switch {
	case !ip.Is4() || !ip.IsGlobalUnicast():
		return fmt.Errorf("%w: egress IP %v is not an IPv4 unicast address", ErrInvalidConfig, ip)
	case c.InCluster(ip):
		return fmt.Errorf("%w: egress IP %v is in the cluster network", ErrInvalidConfig, ip)
	case c.ServiceNetwork.Contains(ip):
		return fmt.Errorf("%w: egress IP %v is in the service network", ErrInvalidConfig, ip)
	case ip == c.NodeIP:
		return fmt.Errorf("%w: egress IP %v is the node's own address", ErrInvalidConfig, ip)
	}
	return nil
}

// EgressIPRules returns the rules of VNID v's egress IP route r, tagged
// EgressIPCookie(v):
//
//   - served here (r.Local): table 101 `ip, reg0=v` → eth_dst=EgressMAC(v),
//     output tun0; table 0 accepts v's outbound traffic from the tunnel
//     (`in_port=vxlan0, ip, tun_id=v, nw_src=C` for each cluster network C);
//   - served by another node (r.Via): table 101 `ip, reg0=v` → tunnel to
//     it with VNI v;
//   - served by nobody: table 101 `reg0=v` → drop.
//
// Only traffic leaving the cluster reaches table 101. Egress IPs need
// per-project VNIDs: in subnet mode, or for VNID 0, it is an error.
func EgressIPRules(cfg NodeConfig, v uint32, r EgressRoute) ([]*flowtable.Rule, error) {
	if m := cfg.Mode.Canonical(); m != ModeMultitenant && m != ModeNetworkPolicy {
		return nil, fmt.Errorf("%w: egress IPs need the multitenant or networkpolicy mode", ErrInvalidConfig)
	}
	if v == 0 || v > MaxVNID {
		return nil, fmt.Errorf("%w: no egress IP for VNID %d (global projects have none)", ErrInvalidConfig, v)
	}
	c := EgressIPCookie(v)
	var b flowtable.Builder
	ip, reg0 := flowtable.IP(), flowtable.Reg(0, v)
	switch {
	case r.Local && r.IP.IsValid():
		b.Add(TableEgressIP, 100, c, match{ip, reg0},
			flowtable.SetFieldMAC(flowtable.FieldEthDst, EgressMAC(v)), outputTun0())
		for _, cn := range cfg.ClusterNetworks {
			b.Add(TableClassify, 200, c, match{flowtable.InPort(PortVXLAN), ip, flowtable.TunID(uint64(v)), flowtable.NwSrcPrefix(cn)},
				tunToReg0(), gotoTable(TableVXLANIn))
		}
	case r.Via.IsValid() && r.IP.IsValid():
		via := r.Via.Unmap()
		if !via.Is4() {
			return nil, fmt.Errorf("%w: egress node %v is not IPv4", ErrInvalidConfig, r.Via)
		}
		b.Add(TableEgressIP, 100, c, match{ip, reg0},
			reg0ToTun(), flowtable.SetFieldIPv4(flowtable.FieldTunDst, via.As4()), outputVXLAN())
	default:
		b.Add(TableEgressIP, 100, c, match{reg0})
	}
	return b.Rules()
}

// EgressIPHost is one of a project's egress IPs and the node that hosts
// it, as the control plane says: Local (this node), NodeIP (a reachable
// remote node's underlay address), or neither (no reachable node hosts it,
// or the claim is in conflict).
type EgressIPHost struct {
	IP     netip.Addr
	Node   string
	NodeIP netip.Addr
	Local  bool
}

// Served reports whether a reachable node hosts h.
func (h EgressIPHost) Served() bool { return h.IP.IsValid() && (h.Local || h.NodeIP.IsValid()) }

// EgressRouteOf returns the route of a project whose egress IPs are hosts,
// in order: the first served one serves (several give high availability);
// none served: drop. An egress IP cfg refuses (CheckEgressIP) serves
// nobody.
func EgressRouteOf(cfg NodeConfig, hosts []EgressIPHost) EgressRoute {
	for _, h := range hosts {
		if !h.Served() || cfg.CheckEgressIP(h.IP) != nil {
			continue
		}
		if h.Local {
			return EgressRoute{IP: h.IP, Local: true}
		}
		return EgressRoute{IP: h.IP, Via: h.NodeIP}
	}
	return EgressRoute{}
}
