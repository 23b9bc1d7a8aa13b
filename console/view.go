package console

import (
	"context"
	"net/netip"
	"slices"
	"time"
)

// View is the cluster as the console shows it: what a Source read from the
// control plane and the nodes, before (Source.Load) or after (View.For) it
// is cut down to what one viewer may see.
type View struct {
	// Mode is the plug-in mode: subnet, multitenant or networkpolicy.
	Mode            string
	ClusterNetworks []string
	ServiceNetwork  string
	Nodes           []Node
	Projects        []Project
	Pods            []Pod
	Policies        []Policy
	// Notes say what could not be read (a node that did not answer, a
	// part hidden from the viewer); the pages show them.
	Notes []string
	// Read is when the Source read it.
	Read time.Time
}

// Node is a node of the cluster map.
type Node struct {
	Name   string
	IP     netip.Addr
	Subnet netip.Prefix
	// Tunnel is the node's tunnel state as the control plane holds it:
	// "up" while the node's registration (lease) holds and it has a
	// subnet, else why not.
	Tunnel string
	// EgressIPs are the egress IPs the node hosts (its own record and
	// what gvs-master assigned), EgressCIDRs the ranges it may be given.
	EgressIPs   []string
	EgressCIDRs []string
	// FixedVNID is set for a host that is not a node (its one VNID).
	FixedVNID *uint32
}

// Project is a project (namespace) with its VNID.
type Project struct {
	Name string
	VNID uint32
	// Global: VNID 0, reaches and is reached by every project.
	Global    bool
	Multicast bool
	EgressIPs []string
	// Firewall is the project's egress firewall, one rule a line in
	// order ("Allow to 10.0.0.0/8"), empty without one.
	Firewall []string
}

// Pod is a pod of a node.
type Pod struct {
	Namespace, Name string
	Node            string
	IP              netip.Addr
	VNID            uint32
	Labels          map[string]string
	// Port is the pod's switch port on its node (0 when unknown).
	Port uint32
	// Traffic is the port's counters, nil when the node did not say.
	Traffic *Traffic
}

// Key returns "namespace/name".
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

// Traffic is a pod port's counters, as seen from the switch: Rx is what the
// pod sent, Tx what it was sent.
type Traffic struct {
	RxPackets, RxBytes, RxDrops uint64
	TxPackets, TxBytes, TxDrops uint64
	// RxRate and TxRate are bytes per second since the console's previous
	// read of the counters (0 on the first).
	RxRate, TxRate float64
}

// Policy is a NetworkPolicy and the pods it selects.
type Policy struct {
	Namespace, Name string
	// PodSelector is the policy's pod selector in label-selector syntax
	// ("" selects every pod of the namespace).
	PodSelector string
	// Types are its policyTypes (Ingress, Egress).
	Types []string
	// Ingress and Egress are its rules, one a line.
	Ingress, Egress []string
	// Selects lists the pods (namespace/name) the selector matches.
	Selects []string
}

// Source reads the whole cluster; the console cuts the result down for
// each viewer (View.For). Load must be safe for concurrent use.
type Source interface {
	Load(ctx context.Context) (View, error)
}

// Scope is what a viewer may see: the whole cluster, or the projects
// (namespaces) named.
type Scope struct {
	// All: every project, the nodes and the cluster's configuration.
	All bool
	// Namespaces are the projects seen when All is false.
	Namespaces map[string]bool
}

// Sees reports whether s includes project ns.
func (s Scope) Sees(ns string) bool { return s.All || s.Namespaces[ns] }

// For returns what scope s may see of v: with All, v itself; else only the
// projects in s, their pods and policies, and no nodes (the nodes, their
// addresses and the egress IPs they host belong to the cluster's
// operator). It never returns anything of a project outside s.
func (v View) For(s Scope) View {
	if s.All {
		return v
	}
	out := View{Mode: v.Mode, Read: v.Read,
		Notes: []string{"You see only your own projects: nodes, subnets and other projects are hidden."}}
	for _, p := range v.Projects {
		if s.Sees(p.Name) {
			out.Projects = append(out.Projects, p)
		}
	}
	for _, p := range v.Pods {
		if s.Sees(p.Namespace) {
			p.Node = "" // where a pod runs tells of the nodes
			out.Pods = append(out.Pods, p)
		}
	}
	for _, p := range v.Policies {
		if s.Sees(p.Namespace) {
			p.Selects = slices.DeleteFunc(slices.Clone(p.Selects), func(k string) bool {
				ns, _, _ := cutKey(k)
				return !s.Sees(ns)
			})
			out.Policies = append(out.Policies, p)
		}
	}
	return out
}

func cutKey(k string) (ns, name string, ok bool) {
	for i := range len(k) {
		if k[i] == '/' {
			return k[:i], k[i+1:], true
		}
	}
	return "", k, false
}

// rates sets the Traffic rates of v's pods from the counters of prev, read
// dt earlier (a pod's port is the same when its node and address are).
func (v *View) rates(prev View) {
	dt := v.Read.Sub(prev.Read).Seconds()
	if dt <= 0 {
		return
	}
	type key struct {
		node string
		ip   netip.Addr
	}
	old := map[key]*Traffic{}
	for _, p := range prev.Pods {
		if p.Traffic != nil {
			old[key{p.Node, p.IP}] = p.Traffic
		}
	}
	for i := range v.Pods {
		p := &v.Pods[i]
		o, ok := old[key{p.Node, p.IP}]
		if p.Traffic == nil || !ok || p.Traffic.RxBytes < o.RxBytes || p.Traffic.TxBytes < o.TxBytes {
			continue // a new port, or counters that restarted
		}
		p.Traffic.RxRate = float64(p.Traffic.RxBytes-o.RxBytes) / dt
		p.Traffic.TxRate = float64(p.Traffic.TxBytes-o.TxBytes) / dt
	}
}
