package master

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"
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

// PlanEgressIPs is the whole of automatic egress IP assignment, the same
// for both control planes (the etcd registry's AssignEgress and the
// Kubernetes master): every IPv4 egress IP a project names, except those
// a node hosts by hand (manual), is assigned with AssignEgressIPs to a node
// of nodes. It returns the egress IPs each node of nodes is to host,
// sorted; a node with none has no entry.
func PlanEgressIPs(projects map[string][]netip.Addr, manual []netip.Addr, nodes map[string]EgressNode, prev map[netip.Addr]string) map[string][]netip.Addr {
	var want []netip.Addr
	for _, ips := range projects {
		for _, ip := range ips {
			if ip.Is4() && !slices.Contains(manual, ip) {
				want = append(want, ip)
			}
		}
	}
	byNode := map[string][]netip.Addr{}
	for ip, n := range AssignEgressIPs(want, nodes, prev) {
		byNode[n] = append(byNode[n], ip)
	}
	for _, ips := range byNode {
		slices.SortFunc(ips, netip.Addr.Compare)
	}
	return byNode
}

// ParseAddrs reads the addresses of ss as the control planes store them,
// skipping what does not parse.
func ParseAddrs(ss []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		if ip, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

// FormatAddrs returns the addresses as the control planes store them.
func FormatAddrs(ips []netip.Addr) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// ParsePrefixes reads egress CIDRs as the control planes store them,
// masked, skipping what is not an IPv4 prefix.
func ParsePrefixes(ss []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		if p, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil && p.Addr().Is4() {
			out = append(out, p.Masked())
		}
	}
	return out
}

// EgressProbePort is the TCP port the reachability probe connects to, as
// OpenShift's master does: the discard port, normally closed, so a live
// host answers with a reset.
const EgressProbePort = 9

// Default timing of the reachability check (OpenShift's master polls every
// 5 s and re-checks a node that failed twice, a second apart, before it
// moves its egress IPs).
const (
	DefaultEgressCheckInterval = 5 * time.Second
	EgressProbeTimeout         = time.Second
	EgressProbeRetries         = 2
)

// Reachable reports whether ip answers a TCP connection to
// EgressProbePort within timeout: refused (a reset) or accepted is
// reachable; a timeout, an ICMP error or no route is not. OpenShift's
// master probes a node's SDN address (its tun0, the gateway of its subnet)
// this way: it answers only while the node's switch carries the overlay.
func Reachable(ctx context.Context, ip netip.Addr, timeout time.Duration) bool {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(ip, EgressProbePort).String())
	if err == nil {
		_ = conn.Close()
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// ProbeNode is Reachable with OpenShift's retries: a node that does not
// answer is asked again up to EgressProbeRetries times, a second apart,
// before it counts as unreachable (a lost packet does not move egress IPs).
func ProbeNode(ctx context.Context, ip netip.Addr) bool {
	for i := 0; ; i++ {
		if Reachable(ctx, ip, EgressProbeTimeout) {
			return true
		}
		if i == EgressProbeRetries || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}
