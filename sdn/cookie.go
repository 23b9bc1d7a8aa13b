package sdn

import (
	"fmt"
	"net/netip"
)

// Cookies tag the rules that belong to one object so that they can be
// deleted together (ovs-ofctl del-flows "cookie=C/0xffffffffffffffff"). A cookie is a class
// in bits 32–39 and the object's key in the low 32 bits:
//
//	0x1_AABBCCDD  a local pod, keyed by its IPv4 address AA.BB.CC.DD
//	0x2_AABBCCDD  a remote node, keyed by its underlay IPv4 address
//	0x3_00VVVVVV  a VNID's isolation rules (multitenant table 80)
//	0x4_00VVVVVV  a VNID's multicast rules (tables 110 and 120)
//	0x4_01000000  the multicast fan-out to the remote nodes (table 111)
//	0x5_AABBCCDD  a local pod's NetworkPolicy ingress rules (table 80), by its IPv4
//	0x6_AABBCCDD  a local pod's NetworkPolicy egress rules (table 27), by its IPv4
//	0x7_AABBCCDD  a service, keyed by its ClusterIP (multitenant table 60)
//	0x8_00VVVVVV  a VNID's egress firewall (table 100)
//	0x9_00VVVVVV  a VNID's egress IP route (tables 0 and 101)
//
// The rules of SetupRules carry cookie 0. Cookies never collide across
// classes, and within a class they are unique because the keys are.
const (
	cookieClassPod      uint64 = 1 << 32
	cookieClassNode     uint64 = 2 << 32
	cookieClassVNID     uint64 = 3 << 32
	cookieClassMcast    uint64 = 4 << 32
	cookieClassIngress  uint64 = 5 << 32
	cookieClassEgress   uint64 = 6 << 32
	cookieClassService  uint64 = 7 << 32
	cookieClassEgressFW uint64 = 8 << 32
	cookieClassEgressIP uint64 = 9 << 32
)

// PodCookie returns the cookie of the rules of the pod with address ip.
func PodCookie(ip netip.Addr) uint64 { return cookieClassPod | uint64(ipUint(ip)) }

// IngressCookie returns the cookie of the NetworkPolicy ingress rules of
// the local pod with address ip (table 80).
func IngressCookie(ip netip.Addr) uint64 { return cookieClassIngress | uint64(ipUint(ip)) }

// EgressCookie returns the cookie of the NetworkPolicy egress rules of the
// local pod with address ip (table 27).
func EgressCookie(ip netip.Addr) uint64 { return cookieClassEgress | uint64(ipUint(ip)) }

// NodeCookie returns the cookie of the rules of the remote node with
// underlay address ip.
func NodeCookie(ip netip.Addr) uint64 { return cookieClassNode | uint64(ipUint(ip)) }

// VNIDCookie returns the cookie of the isolation rules of VNID v.
func VNIDCookie(v uint32) uint64 { return cookieClassVNID | uint64(v&MaxVNID) }

// CookieFilter returns the ovs-ofctl del-flows/dump-flows filter text that
// selects exactly the rules with cookie c: "cookie=0x…/0xffffffffffffffff"
// (ovs-ofctl also accepts the mask -1; the full mask is the more portable).
func CookieFilter(c uint64) string { return fmt.Sprintf("cookie=%#x/0xffffffffffffffff", c) }

// PodFilter returns the del-flows filter that removes the rules of the pod
// with address ip (the five rules of PodRules).
func PodFilter(ip netip.Addr) string { return CookieFilter(PodCookie(ip)) }

// NodeFilter returns the del-flows filter that removes the rules of the
// remote node with underlay address ip (the three rules of NodeRules).
func NodeFilter(ip netip.Addr) string { return CookieFilter(NodeCookie(ip)) }

// MulticastCookie returns the cookie of the multicast rules of VNID v
// (MulticastRules).
func MulticastCookie(v uint32) uint64 { return cookieClassMcast | uint64(v&MaxVNID) }

// MulticastFanoutCookie is the cookie of table 111's head-end replication
// (MulticastFanoutRules): in the multicast class, with a key no VNID has
// (VNIDs have 24 bits).
const MulticastFanoutCookie = cookieClassMcast | 1<<24

// VNIDFilter returns the del-flows filter that removes the isolation rules
// of VNID v (VNIDRules), for when no local pod uses it any more.
func VNIDFilter(v uint32) string { return CookieFilter(VNIDCookie(v)) }

// ipUint returns an IPv4 address as a number; 0 for anything that is not
// IPv4 (validated configurations never pass one).
func ipUint(ip netip.Addr) uint32 {
	a := as4(ip)
	return uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
}

// as4 returns the four bytes of an IPv4 (or IPv4-mapped) address, or zeros.
func as4(ip netip.Addr) [4]byte {
	ip = ip.Unmap()
	if !ip.Is4() {
		return [4]byte{}
	}
	return ip.As4()
}
