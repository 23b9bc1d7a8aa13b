package sdn

import (
	"fmt"

	"github.com/gvswitch/gvs/flowtable"
)

// Hosts that are not nodes (OpenShift's F5 BIG-IP "ramp").
//
// An administrator registers an external VTEP with a subnet of the cluster
// network (a HostSubnet with the pod.network.openshift.io/assign-subnet
// annotation, or `gvsctl ramp add` in etcd mode); every node tunnels that
// subnet to the host's address. Without a fixed VNID the host is treated
// exactly as a node: NodeRules, the source VNID on the wire both ways, so
// the host chooses the VNID of what it sends (as a node does). With a
// fixed VNID V (pod.network.openshift.io/fixed-vnid-host) the way through
// a node's tables is:
//
//  1. Table 0 moves the VNI of what arrives from vxlan0 into reg0, as for
//     any VTEP.
//  2. Table 10 accepts the host's VXLAN (tun_src) only with VNI V: the host
//     cannot speak as another project (OpenShift's table 10 does not look
//     at the VNI; gvs does).
//  3. Tables 30..80 as for a remote pod of VNID V: table 80 admits it to
//     pods of V and to global (VNID 0) pods, to no other project.
//  4. Tables 50 (ARP) and 90 (IP) send the host's subnet into the tunnel
//     with VNI V instead of reg0. In multitenant mode with V ≠ 0 only pods
//     of V and global pods (and the node itself, VNID 0) may: another
//     project's traffic falls to the tables' default drop, where
//     OpenShift would send it with VNI V and leave the refusal to the
//     host. With V = 0 the host is global both ways. In the subnet and
//     networkpolicy modes every source is sent (with VNI V), as OpenShift
//     does: there VNIDs do not isolate.

// RampRules returns the rules of a host that is not a node and has a fixed
// VNID (host.HasFixedVNID), all tagged with NodeCookie(host.IP) like a
// node's: NodeRules calls it for such a host. The host should pass
// cfg.CheckRemote; an error means it does not.
func RampRules(cfg NodeConfig, host RemoteNode) ([]*flowtable.Rule, error) {
	ip := host.IP.Unmap()
	if !ip.Is4() || !host.HasFixedVNID {
		return nil, fmt.Errorf("%w: host %s (%v) is not an IPv4 host with a fixed VNID", ErrInvalidConfig, host.Name, host.IP)
	}
	if host.FixedVNID > MaxVNID {
		return nil, fmt.Errorf("%w: host %s fixed VNID %d exceeds %d", ErrInvalidConfig, host.Name, host.FixedVNID, MaxVNID)
	}
	v := host.FixedVNID
	c := NodeCookie(ip)
	sub := flowtable.NwDstPrefix(host.Subnet.Masked())
	tunnel := []flowtable.Action{
		flowtable.Load(uint64(v), flowtable.FieldTunID.Bits(0, 31)),
		flowtable.SetFieldIPv4(flowtable.FieldTunDst, ip.As4()),
		outputVXLAN(),
	}
	var b flowtable.Builder
	b.Add(TableVXLANIn, 100, c, match{flowtable.TunSrc(ip), flowtable.Reg(0, v)}, gotoTable(TableConntrack))
	if cfg.Mode.Canonical() == ModeMultitenant && v != 0 {
		// Only V and the global VNID 0 may reach the host.
		for _, from := range []uint32{0, v} {
			b.Add(TableARPRemote, 100, c, match{flowtable.ARP(), sub, flowtable.Reg(0, from)}, tunnel...)
			b.Add(TableIPRemote, 100, c, match{flowtable.IP(), sub, flowtable.Reg(0, from)}, tunnel...)
		}
		return b.Rules()
	}
	b.Add(TableARPRemote, 100, c, match{flowtable.ARP(), sub}, tunnel...)
	b.Add(TableIPRemote, 100, c, match{flowtable.IP(), sub}, tunnel...)
	return b.Rules()
}
