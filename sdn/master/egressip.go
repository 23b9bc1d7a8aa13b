package master

import (
	"maps"
	"net/netip"
	"slices"
)

// EgressNode is a node as automatic egress IP assignment sees it: the
// ranges it may host egress IPs from (OpenShift's HostSubnet egressCIDRs)
// and whether it is reachable now.
type EgressNode struct {
	CIDRs []netip.Prefix
	Live  bool
}

// AssignEgressIPs assigns the egress IPs in want to nodes whose egress
// CIDRs contain them (OpenShift's master does this for HostSubnets with
// egressCIDRs): an IP keeps its previous node while that node is live and
// its CIDRs still contain it; otherwise it goes to the live node with
// room for it that holds the fewest (ties: by name), spreading them. An IP
// no live node's CIDRs contain is not assigned (its project's traffic is
// dropped by the nodes, fail closed). It returns the new assignment, IP
// → node; it is a pure function of its arguments.
func AssignEgressIPs(want []netip.Addr, nodes map[string]EgressNode, prev map[netip.Addr]string) map[netip.Addr]string {
	fits := func(n string, ip netip.Addr) bool {
		en, ok := nodes[n]
		if !ok || !en.Live {
			return false
		}
		for _, c := range en.CIDRs {
			if c.Contains(ip) {
				return true
			}
		}
		return false
	}
	ips := slices.Clone(want)
	slices.SortFunc(ips, netip.Addr.Compare)
	ips = slices.Compact(ips)
	out := map[netip.Addr]string{}
	count := map[string]int{}
	var moving []netip.Addr
	for _, ip := range ips {
		if n, ok := prev[ip]; ok && fits(n, ip) {
			out[ip] = n
			count[n]++
			continue
		}
		moving = append(moving, ip)
	}
	names := slices.Sorted(maps.Keys(nodes))
	for _, ip := range moving {
		best := ""
		for _, n := range names {
			if fits(n, ip) && (best == "" || count[n] < count[best]) {
				best = n
			}
		}
		if best != "" {
			out[ip] = best
			count[best]++
		}
	}
	return out
}
