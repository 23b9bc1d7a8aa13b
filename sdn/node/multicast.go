package node

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
)

// Multicast, as OpenShift SDN does it: a project opts in (the NetNamespace
// annotation netnamespace.network.openshift.io/multicast-enabled=true, or
// the registry's project record), and its VNID then has the multicast
// rules of tables 110 and 120 (sdn.MulticastRules) on every node where it
// has local pods: its pods' multicast goes to every remote node (table
// 111, sdn.MulticastFanoutRules, which follows the remote nodes in every
// mode) and to its other local pods, and what comes from vxlan0 with its
// VNI goes to its local pods. A VNID is opted in when one of its projects
// is (joined projects share a VNID, and already reach each other). Only in
// the modes that isolate projects (multitenant, networkpolicy), as in
// OpenShift SDN; in subnet mode multicast stays dropped.
//
// The rules of a VNID follow its local pods (AddPod, RemovePod), its
// projects' VNIDs (SetProjectVNID) and opt-ins (SetMulticast), each in the
// same table update as the change that moves them, so that a pod re-tagged
// to another VNID never receives its old VNID's multicast.

// SetMulticast opts project in to multicast (on) or out, and installs or
// removes its VNID's multicast rules at once (a project without a VNID yet
// gets them with its VNID). A project the Program does not know is recorded
// all the same.
func (p *Program) SetMulticast(project string, on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mcast[project] == on {
		return nil
	}
	prev := p.mcast[project]
	if on {
		p.mcast[project] = true
	} else {
		delete(p.mcast, project)
	}
	v, ok := p.projects[project]
	if !ok || !p.isolated() {
		return nil
	}
	dels, adds, err := p.multicastUpdate(nil, v)
	if err == nil {
		err = p.table.Apply(dels, adds)
	}
	if err != nil {
		if prev {
			p.mcast[project] = true
		} else {
			delete(p.mcast, project)
		}
		return fmt.Errorf("project %s: multicast: %w", project, err)
	}
	return nil
}

// MulticastProjects lists the projects opted in to multicast, sorted.
func (p *Program) MulticastProjects() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.mcast))
}

// multicastOn reports whether VNID v is opted in: in a mode that isolates
// projects, one of the projects with VNID v is. p.mu is held.
func (p *Program) multicastOn(v uint32) bool {
	if !p.isolated() {
		return false
	}
	for name := range p.mcast {
		if pv, ok := p.projects[name]; ok && pv == v {
			return true
		}
	}
	return false
}

// multicastUpdate returns the table update that gives each VNID in vnids
// the multicast rules it is to have once a pending change is made: the
// local pods are p.pods with change applied (a pod by address; nil: the
// pod goes away). p.mu is held.
func (p *Program) multicastUpdate(change map[netip.Addr]*sdn.Pod, vnids ...uint32) ([]flowtable.Filter, []*flowtable.Rule, error) {
	vs := slices.Clone(vnids)
	slices.Sort(vs)
	vs = slices.Compact(vs)
	var dels []flowtable.Filter
	var adds []*flowtable.Rule
	for _, v := range vs {
		dels = append(dels, cookieFilter(sdn.MulticastCookie(v)))
		if !p.multicastOn(v) {
			continue
		}
		var ports []uint32
		for ip, pod := range p.pods {
			if _, changed := change[ip]; !changed && pod.VNID == v {
				ports = append(ports, pod.Port)
			}
		}
		for _, pod := range change {
			if pod != nil && pod.VNID == v {
				ports = append(ports, pod.Port)
			}
		}
		rs, err := sdn.MulticastRules(p.node, v, ports)
		if err != nil {
			return nil, nil, fmt.Errorf("multicast rules of VNID %d: %w", v, err)
		}
		adds = append(adds, rs...)
	}
	return dels, adds, nil
}

// fanoutUpdate returns the table update that gives table 111 a copy to
// each remote node of remotes (sdn.MulticastFanoutRules). p.mu is held.
func (p *Program) fanoutUpdate(remotes []netip.Addr) ([]flowtable.Filter, []*flowtable.Rule, error) {
	rs, err := sdn.MulticastFanoutRules(p.node, remotes)
	if err != nil {
		return nil, nil, err
	}
	return []flowtable.Filter{cookieFilter(sdn.MulticastFanoutCookie)}, rs, nil
}

// remoteIPs returns the addresses of the remote nodes, with add added and
// drop left out (either may be invalid). Hosts with a fixed VNID (not
// nodes: OpenShift's F5 ramp, sdn/ramp.go) are left out: a project's
// multicast would reach them with its own VNI, past the one VNID they may
// hear. p.mu is held.
func (p *Program) remoteIPs(add, drop netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(p.remotes)+1)
	for ip, rn := range p.remotes {
		if ip != drop && ip != add && !rn.HasFixedVNID {
			out = append(out, ip)
		}
	}
	if add.IsValid() {
		out = append(out, add)
	}
	return out
}
