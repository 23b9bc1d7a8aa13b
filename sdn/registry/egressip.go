package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/sdn/master"
)

// Egress IPs (OpenShift's NetNamespace and HostSubnet egressIPs): a
// project's egress IPs, and the egress IPs a node hosts, each in a record
// of its own under EgressIPsPrefix. Only administrators write them (nodes
// read everything, write only their own keys): neither a tenant nor a
// node's credentials can claim an egress IP.
const (
	EgressIPsPrefix     = Prefix + "egress-ips/"
	ProjectEgressPrefix = EgressIPsPrefix + "projects/" // +project → EgressIPs
	NodeEgressPrefix    = EgressIPsPrefix + "nodes/"    // +node → EgressIPs (with egressCIDRs)
	// AssignedEgressPrefix+node → EgressIPs: the egress IPs gvs-master
	// assigned to the node from its egressCIDRs (AssignEgressIPs).
	AssignedEgressPrefix = EgressIPsPrefix + "assigned/"
)

// EgressIPs is the record of a project's or a node's egress IPs, in
// order (a project's first reachable one serves).
type EgressIPs struct {
	IPs []string `json:"egressIPs"`
	// CIDRs (a node's record only) are the ranges gvs-master may assign
	// the projects' egress IPs from to this node (OpenShift's HostSubnet
	// egressCIDRs).
	CIDRs []string `json:"egressCIDRs,omitempty"`
}

// SetProjectEgressIPs sets a project's egress IPs; none deletes the
// record.
func (r *Registry) SetProjectEgressIPs(ctx context.Context, project string, ips []netip.Addr) error {
	return r.setEgressIPs(ctx, ProjectEgressPrefix, project, ips)
}

// SetNodeEgressIPs sets the egress IPs a node hosts (its egress CIDRs
// stay); none and no CIDRs delete the record.
func (r *Registry) SetNodeEgressIPs(ctx context.Context, node string, ips []netip.Addr) error {
	rec, err := r.nodeEgress(ctx, node)
	if err != nil {
		return err
	}
	return r.putNodeEgress(ctx, NodeEgressPrefix, node, ips, rec.CIDRs)
}

// SetNodeEgressCIDRs sets the ranges gvs-master may assign egress IPs to
// a node from (its egress IPs stay).
func (r *Registry) SetNodeEgressCIDRs(ctx context.Context, node string, cidrs []netip.Prefix) error {
	rec, err := r.nodeEgress(ctx, node)
	if err != nil {
		return err
	}
	var ips []netip.Addr
	for _, s := range rec.IPs {
		if ip, err := netip.ParseAddr(s); err == nil {
			ips = append(ips, ip)
		}
	}
	var cs []string
	for _, c := range cidrs {
		if !c.Addr().Is4() || c.Masked() != c {
			return fmt.Errorf("egress CIDRs: %v is not an IPv4 network", c)
		}
		cs = append(cs, c.String())
	}
	return r.putNodeEgress(ctx, NodeEgressPrefix, node, ips, cs)
}

// SetAssignedEgressIPs records the egress IPs gvs-master assigned to a
// node; none deletes the record.
func (r *Registry) SetAssignedEgressIPs(ctx context.Context, node string, ips []netip.Addr) error {
	return r.setEgressIPs(ctx, AssignedEgressPrefix, node, ips)
}

func (r *Registry) nodeEgress(ctx context.Context, node string) (EgressIPs, error) {
	var rec EgressIPs
	resp, err := r.c.Get(ctx, NodeEgressPrefix+node)
	if err != nil {
		return rec, fmt.Errorf("egress IPs of node %s: %w", node, err)
	}
	if len(resp.Kvs) > 0 {
		_ = json.Unmarshal(resp.Kvs[0].Value, &rec)
	}
	return rec, nil
}

func (r *Registry) putNodeEgress(ctx context.Context, prefix, node string, ips []netip.Addr, cidrs []string) error {
	if len(cidrs) == 0 {
		return r.setEgressIPs(ctx, prefix, node, ips)
	}
	if node == "" || strings.Contains(node, "/") {
		return fmt.Errorf("egress IPs: bad name %q", node)
	}
	rec := EgressIPs{CIDRs: cidrs, IPs: []string{}}
	for _, ip := range ips {
		rec.IPs = append(rec.IPs, ip.String())
	}
	if _, err := r.c.Put(ctx, prefix+node, jsonOf(rec)); err != nil {
		return fmt.Errorf("egress IPs %s: %w", node, err)
	}
	return nil
}

func (r *Registry) setEgressIPs(ctx context.Context, prefix, name string, ips []netip.Addr) error {
	if name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("egress IPs: bad name %q", name)
	}
	key := prefix + name
	var err error
	if len(ips) == 0 {
		_, err = r.c.Delete(ctx, key)
	} else {
		rec := EgressIPs{}
		for _, ip := range ips {
			if !ip.Is4() {
				return fmt.Errorf("egress IPs: %v is not an IPv4 address", ip)
			}
			rec.IPs = append(rec.IPs, ip.String())
		}
		_, err = r.c.Put(ctx, key, jsonOf(rec))
	}
	if err != nil {
		return fmt.Errorf("egress IPs %s: %w", name, err)
	}
	return nil
}

// EgressState is every egress IP record: the projects', the nodes'
// (with their egress CIDRs) and gvs-master's assignments, by name.
type EgressState struct {
	Projects, Nodes, Assigned map[string]EgressIPs
}

// AllEgressIPs returns every egress IP record.
func (r *Registry) AllEgressIPs(ctx context.Context) (EgressState, error) {
	st := EgressState{Projects: map[string]EgressIPs{}, Nodes: map[string]EgressIPs{}, Assigned: map[string]EgressIPs{}}
	resp, err := r.c.Get(ctx, EgressIPsPrefix, clientv3.WithPrefix())
	if err != nil {
		return st, fmt.Errorf("list egress IPs: %w", err)
	}
	for _, kv := range resp.Kvs {
		var rec EgressIPs
		if json.Unmarshal(kv.Value, &rec) != nil {
			continue
		}
		k := string(kv.Key)
		if p, ok := strings.CutPrefix(k, ProjectEgressPrefix); ok {
			st.Projects[p] = rec
		} else if n, ok := strings.CutPrefix(k, NodeEgressPrefix); ok {
			st.Nodes[n] = rec
		} else if n, ok := strings.CutPrefix(k, AssignedEgressPrefix); ok {
			st.Assigned[n] = rec
		}
	}
	return st, nil
}

// AssignEgress is gvs-master's automatic egress IP assignment (OpenShift's
// egressCIDRs): every project egress IP that no node's record names goes
// to a live node (one with a subnet record: its lease holds) whose egress
// CIDRs contain it (master.AssignEgressIPs: spread, kept while they can
// stay, moved off a node that is gone), recorded under
// AssignedEgressPrefix. The nodes follow those records as they follow the
// nodes' own. It returns the assignment, IP → node.
func (r *Registry) AssignEgress(ctx context.Context) (map[netip.Addr]string, error) {
	st, err := r.AllEgressIPs(ctx)
	if err != nil {
		return nil, err
	}
	subs, _, err := r.Subnets(ctx)
	if err != nil {
		return nil, err
	}
	var manual []netip.Addr
	nodes := map[string]master.EgressNode{}
	for _, s := range subs {
		nodes[s.Node] = master.EgressNode{Live: true}
	}
	for n, rec := range st.Nodes {
		manual = append(manual, master.ParseAddrs(rec.IPs)...)
		en := nodes[n]
		en.CIDRs = master.ParsePrefixes(rec.CIDRs)
		nodes[n] = en
	}
	projects := map[string][]netip.Addr{}
	for p, rec := range st.Projects {
		projects[p] = master.ParseAddrs(rec.IPs)
	}
	prev := map[netip.Addr]string{}
	for n, rec := range st.Assigned {
		for _, ip := range master.ParseAddrs(rec.IPs) {
			prev[ip] = n
		}
	}
	byNode := master.PlanEgressIPs(projects, manual, nodes, prev)
	got := map[netip.Addr]string{}
	var errs []error
	for n := range st.Assigned {
		if _, still := byNode[n]; !still {
			errs = append(errs, r.SetAssignedEgressIPs(ctx, n, nil))
		}
	}
	for n, ips := range byNode {
		for _, ip := range ips {
			got[ip] = n
		}
		old := st.Assigned[n].IPs
		if slices.Equal(old, master.FormatAddrs(ips)) {
			continue
		}
		errs = append(errs, r.SetAssignedEgressIPs(ctx, n, ips))
	}
	return got, errors.Join(errs...)
}
