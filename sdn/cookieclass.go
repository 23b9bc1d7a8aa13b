package sdn

import "net/netip"

// CookieClass names the kind of object the rules with cookie c belong to
// (the classes of cookie.go): "setup" for SetupRules' cookie 0, then "pod",
// "node", "vnid", "multicast", "ingress" (a pod's NetworkPolicy ingress
// rules), "egress" (its egress rules), "service", "egress-firewall",
// "egress-ip"; "" for a cookie of no class. Tools that explain a trace
// (sdn/why) use it to say which object a rule came from.
func CookieClass(c uint64) string {
	if c == 0 {
		return "setup"
	}
	switch c &^ 0xffffffff {
	case cookieClassPod:
		return "pod"
	case cookieClassNode:
		return "node"
	case cookieClassVNID:
		return "vnid"
	case cookieClassMcast:
		return "multicast"
	case cookieClassIngress:
		return "ingress"
	case cookieClassEgress:
		return "egress"
	case cookieClassService:
		return "service"
	case cookieClassEgressFW:
		return "egress-firewall"
	case cookieClassEgressIP:
		return "egress-ip"
	}
	return ""
}

// CookiePod returns the pod address a cookie of class "pod", "ingress" or
// "egress" is keyed by (PodCookie, IngressCookie, EgressCookie).
func CookiePod(c uint64) (netip.Addr, bool) {
	switch CookieClass(c) {
	case "pod", "ingress", "egress":
		k := uint32(c)
		return netip.AddrFrom4([4]byte{byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)}), true
	}
	return netip.Addr{}, false
}
