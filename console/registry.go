package console

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/sdn/why"
)

// PortReader reads a node's pods and port counters: why.Remote through the
// nodes' read-only trace endpoints.
type PortReader interface {
	why.PodLister
	Ports(ctx context.Context, node string) ([]control.Port, error)
}

// RegistrySource reads the cluster from the etcd registry (the etcd
// mode), and the pods' traffic from their nodes.
type RegistrySource struct {
	Reg *registry.Registry
	// Nodes, when set, gives the pods' port counters; a node that does not
	// answer leaves its pods without counters and a note.
	Nodes PortReader
}

// Load implements Source.
func (s *RegistrySource) Load(ctx context.Context) (View, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v := View{Read: time.Now()}
	cfg, err := s.Reg.GetConfig(ctx)
	if err != nil {
		return v, err
	}
	v.Mode, v.ServiceNetwork = cfg.Mode, cfg.ServiceNetwork
	for _, cn := range cfg.ClusterNetworks {
		v.ClusterNetworks = append(v.ClusterNetworks, fmt.Sprintf("%s, /%d per node", cn.CIDR, 32-cn.HostSubnetLength))
	}
	nodes, err := s.Reg.Nodes(ctx)
	if err != nil {
		return v, err
	}
	subnets, _, err := s.Reg.Subnets(ctx)
	if err != nil {
		return v, err
	}
	egress, err := s.Reg.AllEgressIPs(ctx)
	if err != nil {
		return v, err
	}
	v.Nodes = nodesOf(nodes, subnets, egress)
	if err := s.projects(ctx, &v, cfg.GlobalProjects, egress); err != nil {
		return v, err
	}
	if err := s.pods(ctx, &v); err != nil {
		return v, err
	}
	nps, err := s.Reg.Policies(ctx, "")
	if err != nil {
		return v, err
	}
	for _, np := range nps {
		v.Policies = append(v.Policies, policyOf(np, v.Pods))
	}
	if s.Nodes != nil {
		traffic(ctx, &v, s.Nodes)
	}
	return v, nil
}

// nodesOf joins the node records (on their leases) and the subnet records:
// a node is "up" when it holds both.
func nodesOf(nodes []registry.Node, subnets []registry.Subnet, eg registry.EgressState) []Node {
	by := map[string]*Node{}
	for _, n := range nodes {
		by[n.Name] = &Node{Name: n.Name, IP: n.IP, FixedVNID: n.FixedVNID, Tunnel: "registered, waiting for a subnet"}
	}
	for _, s := range subnets {
		n, ok := by[s.Node]
		if !ok {
			n = &Node{Name: s.Node, IP: s.IP, Tunnel: "down: registration expired"}
			by[s.Node] = n
		} else {
			n.Tunnel = "up"
		}
		n.Subnet = s.Subnet
		if n.FixedVNID == nil {
			n.FixedVNID = s.FixedVNID
		}
	}
	out := make([]Node, 0, len(by))
	for _, n := range by {
		n.EgressIPs = append(slices.Clone(eg.Nodes[n.Name].IPs), eg.Assigned[n.Name].IPs...)
		n.EgressCIDRs = eg.Nodes[n.Name].CIDRs
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func (s *RegistrySource) projects(ctx context.Context, v *View, global []string, eg registry.EgressState) error {
	recs, err := s.Reg.ProjectRecords(ctx)
	if err != nil {
		return err
	}
	fws, err := s.Reg.EgressFirewalls(ctx, "")
	if err != nil {
		return err
	}
	for name, r := range recs {
		p := Project{Name: name, VNID: r.VNID, Multicast: r.Multicast, Global: r.VNID == 0 && (slices.Contains(global, name) || name == "default"),
			EgressIPs: eg.Projects[name].IPs}
		for _, fw := range fws {
			if fw.Namespace == name {
				p.Firewall = append(p.Firewall, firewallOf(fw)...)
			}
		}
		v.Projects = append(v.Projects, p)
	}
	slices.SortFunc(v.Projects, func(a, b Project) int { return cmp.Compare(a.Name, b.Name) })
	return nil
}

// pods reads the pods' address records (published by their nodes) and
// their labels.
func (s *RegistrySource) pods(ctx context.Context, v *View) error {
	resp, err := s.Reg.Client().Get(ctx, registry.PodsPrefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	_, labels, err := s.Reg.AllLabels(ctx)
	if err != nil {
		return err
	}
	vnid := map[string]uint32{}
	for _, p := range v.Projects {
		vnid[p.Name] = p.VNID
	}
	for _, kv := range resp.Kvs {
		node, ns, name, ok := registry.ParsePodKey(string(kv.Key))
		var a registry.PodAddress
		if !ok || json.Unmarshal(kv.Value, &a) != nil {
			continue
		}
		v.Pods = append(v.Pods, Pod{Namespace: ns, Name: name, Node: node, IP: a.IP, VNID: vnid[ns],
			Labels: labels[ns+"/"+name].Labels})
	}
	sortPods(v.Pods)
	return nil
}

func sortPods(ps []Pod) {
	slices.SortFunc(ps, func(a, b Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

// traffic adds each pod's port counters, asking every node with pods for
// its pods (their ports) and its ports' counters.
func traffic(ctx context.Context, v *View, nr PortReader) {
	type key struct {
		node string
		ip   netip.Addr
	}
	idx := map[key]int{}
	var nodes []string
	for i, p := range v.Pods {
		idx[key{p.Node, p.IP}] = i
		if !slices.Contains(nodes, p.Node) {
			nodes = append(nodes, p.Node)
		}
	}
	// Every node at once: one that does not answer holds up none of the
	// others (each call has its own timeout, why.Remote's).
	type answer struct {
		pods  []why.Pod
		ports []control.Port
		err   error
	}
	answers := make([]answer, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &answers[i]
			if a.pods, a.err = nr.Pods(ctx, n); a.err == nil {
				a.ports, a.err = nr.Ports(ctx, n)
			}
		}()
	}
	wg.Wait()
	for i, n := range nodes {
		if a := answers[i]; a.err != nil {
			v.Notes = append(v.Notes, fmt.Sprintf("node %s: no traffic counters: %v", n, a.err))
		} else {
			addTraffic(v, n, a.pods, a.ports, func(node string, ip netip.Addr) (int, bool) {
				i, ok := idx[key{node, ip}]
				return i, ok
			})
		}
	}
}

func addTraffic(v *View, node string, pods []why.Pod, ports []control.Port, find func(string, netip.Addr) (int, bool)) {
	byNo := map[uint32]control.Port{}
	for _, p := range ports {
		byNo[p.No] = p
	}
	for _, wp := range pods {
		i, ok := find(node, wp.IP)
		pt, okp := byNo[wp.Port]
		if !ok || !okp {
			continue
		}
		v.Pods[i].Port = wp.Port
		v.Pods[i].Traffic = &Traffic{RxPackets: pt.RxPackets, RxBytes: pt.RxBytes, RxDrops: pt.RxDrops,
			TxPackets: pt.TxPackets, TxBytes: pt.TxBytes, TxDrops: pt.TxDrops}
	}
}
