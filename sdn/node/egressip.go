package node

import (
	"errors"
	"maps"
	"net/netip"
	"slices"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
)

// Egress IPs (OpenShift's NetNamespace egressIPs): the Program keeps each
// project's egress IPs with the nodes the control plane says host them and
// installs one route per VNID in tables 0 and 101 (sdn.EgressIPRules).
// Projects joined into one VNID must name the same egress IPs; when they
// do not, nothing tells which should win and the VNID's outbound traffic
// is dropped (fail closed) until an administrator makes them agree.

// SetEgressIPs records project's egress IPs (nil or empty: none) and
// installs its VNID's route.
func (p *Program) SetEgressIPs(project string, hosts []sdn.EgressIPHost) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(hosts) == 0 {
		delete(p.eip, project)
	} else {
		p.eip[project] = slices.Clone(hosts)
	}
	return p.renderEgressIPOf(project)
}

// renderEgressIPOf installs the route of project's VNID, if it has one.
func (p *Program) renderEgressIPOf(project string) error {
	if !p.isolated() {
		return nil
	}
	v, ok := p.projects[project]
	if !ok || v == 0 {
		return nil // no VNID yet (rendered when it comes), or global: none
	}
	return p.renderEgressIP(v)
}

// egressOf returns the egress IPs of VNID v's projects: ok is false when
// none has any, conflict true when they disagree.
func (p *Program) egressOf(v uint32) (hosts []sdn.EgressIPHost, ok, conflict bool) {
	for _, ns := range slices.Sorted(maps.Keys(p.eip)) {
		if pv, known := p.projects[ns]; !known || pv != v {
			continue
		}
		h := p.eip[ns]
		if ok && !slices.EqualFunc(hosts, h, func(a, b sdn.EgressIPHost) bool { return a.IP == b.IP }) {
			conflict = true
		}
		hosts, ok = h, true
	}
	return hosts, ok, conflict
}

// renderEgressIP installs VNID v's route: none (no egress IPs), drop
// (conflict, or no reachable host), or the first served egress IP.
func (p *Program) renderEgressIP(v uint32) error {
	hosts, ok, conflict := p.egressOf(v)
	var rules []*flowtable.Rule
	if ok {
		r := sdn.EgressRoute{}
		if !conflict {
			r = sdn.EgressRouteOf(p.node, hosts)
		}
		var err error
		if rules, err = sdn.EgressIPRules(p.node, v, r); err != nil {
			return err
		}
	}
	return p.table.Apply([]flowtable.Filter{cookieFilter(sdn.EgressIPCookie(v))}, rules)
}

// rerenderEgressIP re-installs the routes of a project's old and new VNID
// (a VNID change).
func (p *Program) rerenderEgressIP(project string, known bool, old, vnid uint32) error {
	if _, has := p.eip[project]; !has || !p.isolated() || known && old == vnid {
		return nil
	}
	var err error
	if known && old != 0 {
		err = p.renderEgressIP(old)
	}
	if vnid != 0 {
		err = errors.Join(err, p.renderEgressIP(vnid))
	}
	return err
}

// HostedEgressIPs returns the egress IPs this node hosts for a project with
// a VNID, with that VNID, by address: what the host must source-NAT to
// (sdn/nat EnsureEgressIPs). An egress IP of a VNID whose projects
// disagree is not hosted.
func (p *Program) HostedEgressIPs() map[netip.Addr]uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[netip.Addr]uint32{}
	if !p.isolated() {
		return out
	}
	for ns, hosts := range p.eip {
		v, known := p.projects[ns]
		if !known || v == 0 {
			continue
		}
		if _, _, conflict := p.egressOf(v); conflict {
			continue
		}
		for _, h := range hosts {
			if h.Local && p.node.CheckEgressIP(h.IP) == nil {
				out[h.IP] = v
			}
		}
	}
	return out
}
