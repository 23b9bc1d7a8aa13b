package source

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/gvswitch/gvs/sdn"
)

// EgressIPSink receives the egress IPs of projects (OpenShift's
// NetNamespace egressIPs) with the node hosting each, as the Mirror works
// them out from the projects' and the nodes' records.
type EgressIPSink interface {
	// SetEgressIPs sets a project's egress IPs, in order (the first one
	// served serves); nil: the project has none.
	SetEgressIPs(project string, hosts []sdn.EgressIPHost) error
}

// The Mirror's side of egress IPs: a project names its egress IPs, a node
// names the egress IPs it hosts (Kubernetes: NetNamespace and HostSubnet
// egressIPs; the registry: /gvs/egress-ips/). An egress IP is served by
// the node that names it when that node is reachable — this node, or a
// remote node the Mirror accepted (its subnet record is there: in the etcd
// registry it goes when the node's lease expires). Conflicts fail closed:
// an egress IP two projects name, or two nodes, or that is a node's own
// address, is served by nobody.

// SetProjectEgressIPs records a project's egress IPs, in order (nil or
// empty: none).
func (m *Mirror) SetProjectEgressIPs(project string, ips []netip.Addr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(ips) == 0 {
		delete(m.projEgress, project)
	} else {
		m.projEgress[project] = slices.Clone(ips)
	}
	m.syncEgress()
}

// SetNodeEgressIPs records the egress IPs a node hosts (nil or empty:
// none).
func (m *Mirror) SetNodeEgressIPs(node string, ips []netip.Addr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(ips) == 0 {
		delete(m.nodeEgress, node)
	} else {
		m.nodeEgress[node] = slices.Clone(ips)
	}
	m.syncEgress()
}

// EgressIPs returns every project's egress IPs with their hosts, as last
// handed to the sink (for gvsctl).
func (m *Mirror) EgressIPs() map[string][]sdn.EgressIPHost {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]sdn.EgressIPHost{}
	for p, hosts := range m.sentEgress {
		out[p] = slices.Clone(hosts)
	}
	return out
}

// egressHosts works out every project's egress IPs with their hosts; m.mu
// is held.
func (m *Mirror) egressHosts() map[string][]sdn.EgressIPHost {
	claims := map[netip.Addr][]string{} // egress IP → projects naming it
	for p, ips := range m.projEgress {
		for _, ip := range slices.Compact(slices.Clone(ips)) {
			if ip.IsValid() {
				claims[ip] = append(claims[ip], p)
			}
		}
	}
	hostedBy := map[netip.Addr][]string{} // egress IP → nodes naming it
	for n, ips := range m.nodeEgress {
		for _, ip := range slices.Compact(slices.Clone(ips)) {
			if ip.IsValid() {
				hostedBy[ip] = append(hostedBy[ip], n)
			}
		}
	}
	nodeIPs := map[netip.Addr]bool{}
	for _, rn := range m.remotes {
		nodeIPs[rn.IP] = true
	}
	out := map[string][]sdn.EgressIPHost{}
	for _, p := range slices.Sorted(maps.Keys(m.projEgress)) {
		var hosts []sdn.EgressIPHost
		for _, ip := range m.projEgress[p] {
			h := sdn.EgressIPHost{IP: ip}
			nodes := hostedBy[ip]
			switch {
			case !ip.IsValid():
			case len(claims[ip]) > 1:
				m.log.Error("egress IP named by several projects: served by none", "ip", ip, "projects", claims[ip])
			case len(nodes) > 1:
				m.log.Error("egress IP hosted by several nodes: served by none", "ip", ip, "nodes", nodes)
			case nodeIPs[ip]:
				m.log.Error("egress IP is a node's address: served by none", "ip", ip)
			case len(nodes) == 1:
				h.Node = nodes[0]
				if h.Node == m.node {
					h.Local = true
				} else if rn, ok := m.remotes[h.Node]; ok {
					h.NodeIP = rn.IP
				}
			}
			hosts = append(hosts, h)
		}
		out[p] = hosts
	}
	return out
}

// syncEgress hands the sink every project's egress IPs that changed; m.mu
// is held. A change of a node's record or of the remotes can move any
// project's, so it looks at all (a handful of projects have egress IPs).
func (m *Mirror) syncEgress() {
	want := m.egressHosts()
	for _, p := range slices.Sorted(maps.Keys(m.sentEgress)) {
		if _, still := want[p]; !still {
			if err := m.sink.SetEgressIPs(p, nil); err != nil {
				m.log.Error("egress IPs", "project", p, "err", err)
			}
			delete(m.sentEgress, p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(want)) {
		if slices.Equal(m.sentEgress[p], want[p]) {
			continue
		}
		if err := m.sink.SetEgressIPs(p, want[p]); err != nil {
			m.log.Error("egress IPs", "project", p, "err", err)
		}
		m.sentEgress[p] = want[p]
	}
}

// ParseEgressIPs reads egress IPs as the control plane stores them. An
// entry that is not an IPv4 address keeps its place as the invalid
// address, which nothing serves (a project that names only such entries
// has its outbound traffic dropped, not masqueraded); err says which.
func ParseEgressIPs(ss []string) ([]netip.Addr, error) {
	var bad []string
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		ip, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || !ip.Is4() {
			bad = append(bad, s)
			ip = netip.Addr{}
		}
		out = append(out, ip)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("egress IPs %q are not IPv4 addresses", bad)
	}
	return out, nil
}
