package why_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/why"
)

// labCluster is two nodes' real rule programs (sdn.SetupRules, PodRules,
// VNIDRules, NodeRules) in real flow tables, traced as gvs-switchd's trace
// does: the Tracer and PodLister of the tests.
type labCluster struct {
	nodes map[string]*labNode
}

type labNode struct {
	// policies are what the node names for NetworkPolicy cookies
	// (control.TraceResult.Policies), as gvs-switchd's trace does.
	policies []control.PolicyRules
	cfg      sdn.NodeConfig
	table    *flowtable.Table
	pods     []why.Pod
	peers    []sdn.RemoteNode
}

var (
	clusterNet = netip.MustParsePrefix("10.128.0.0/14")
	serviceNet = netip.MustParsePrefix("172.30.0.0/16")
)

// newLabCluster builds nodes a (192.168.1.1, 10.128.0.0/23) and b
// (192.168.1.2, 10.128.2.0/23) in mode m with these pods:
//
//	a: p1/client 10.128.0.2 port 3 VNID 10, p2/other 10.128.0.3 port 4 VNID 11
//	b: p1/server 10.128.2.2 port 3 VNID 10, p2/server 10.128.2.3 port 4 VNID 11,
//	   p1/locked 10.128.2.4 port 5 VNID 10
//
// extra are more rules per node (a NetworkPolicy's, as sdn/netpol writes
// them).
func newLabCluster(t testing.TB, m sdn.Mode, extra map[string][]*flowtable.Rule) *labCluster {
	t.Helper()
	c, err := buildLabCluster(m, extra)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// buildLabCluster is newLabCluster for an Example, without a testing.TB.
func buildLabCluster(m sdn.Mode, extra map[string][]*flowtable.Rule) (*labCluster, error) {
	mk := func(name, ip, subnet string) *labNode {
		return &labNode{cfg: sdn.NodeConfig{NodeName: name, NodeIP: netip.MustParseAddr(ip), Subnet: netip.MustParsePrefix(subnet),
			ClusterNetworks: []netip.Prefix{clusterNet}, ServiceNetwork: serviceNet, Mode: m, MTU: 1450}, table: flowtable.New(flowtable.Config{})}
	}
	c := &labCluster{nodes: map[string]*labNode{"a": mk("a", "192.168.1.1", "10.128.0.0/23"), "b": mk("b", "192.168.1.2", "10.128.2.0/23")}}
	pod := func(node, ns, name, ip string, port, vnid uint32) why.Pod {
		a := netip.MustParseAddr(ip)
		return why.Pod{Namespace: ns, Name: name, Node: node, IP: a, MAC: sdn.FormatMAC(sdn.PodMAC(a)), Port: port, VNID: vnid}
	}
	c.nodes["a"].pods = []why.Pod{pod("a", "p1", "client", "10.128.0.2", 3, 10), pod("a", "p2", "other", "10.128.0.3", 4, 11)}
	c.nodes["b"].pods = []why.Pod{pod("b", "p1", "server", "10.128.2.2", 3, 10), pod("b", "p2", "server", "10.128.2.3", 4, 11),
		pod("b", "p1", "locked", "10.128.2.4", 5, 10)}
	for name, n := range c.nodes {
		rules, err := sdn.SetupRules(n.cfg)
		if err != nil {
			return nil, err
		}
		vnids := map[uint32]bool{}
		for _, p := range n.pods {
			r, err := sdn.PodRules(n.cfg, sdn.Pod{Name: p.Name, Namespace: p.Namespace, IP: p.IP, Port: p.Port, VNID: p.VNID})
			if err != nil {
				return nil, err
			}
			rules = append(rules, r...)
			vnids[p.VNID] = true
		}
		for v := range vnids {
			r, err := sdn.VNIDRules(n.cfg, v)
			if err != nil {
				return nil, err
			}
			rules = append(rules, r...)
		}
		for other, o := range c.nodes {
			if other == name {
				continue
			}
			rn := sdn.RemoteNode{Name: other, IP: o.cfg.NodeIP, Subnet: o.cfg.Subnet}
			r, err := sdn.NodeRules(n.cfg, rn)
			if err != nil {
				return nil, err
			}
			rules = append(rules, r...)
			n.peers = append(n.peers, rn)
		}
		rules = append(rules, extra[name]...)
		if err := n.table.Add(rules...); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Trace runs packet through node's table and fills Next as gvs-switchd's
// trace does (why.NextHops).
func (c *labCluster) Trace(_ context.Context, node, packet string) (control.TraceResult, error) {
	n, ok := c.nodes[node]
	if !ok {
		return control.TraceResult{}, fmt.Errorf("no node %q", node)
	}
	f, opts, err := flowtable.ParseTrace(packet)
	if err != nil {
		return control.TraceResult{}, err
	}
	tr := n.table.Snapshot().TraceWith(f, opts)
	res := control.TraceResult{Node: node, Trace: tr, Text: tr.String(), Policies: n.policies}
	res.Next = why.NextHops(tr, f, n.cfg.NodeIP, func(ip netip.Addr) (string, bool) {
		for _, p := range n.peers {
			if p.IP == ip {
				return p.Name, true
			}
		}
		return "", false
	})
	return res, nil
}

// Pods lists node's pods.
func (c *labCluster) Pods(_ context.Context, node string) ([]why.Pod, error) {
	n, ok := c.nodes[node]
	if !ok {
		return nil, fmt.Errorf("no node %q", node)
	}
	return n.pods, nil
}

// pods returns all pods of c.
func (c *labCluster) pods(t testing.TB) []why.Pod {
	t.Helper()
	ps, err := why.ListPods(context.Background(), c, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func find(t testing.TB, pods []why.Pod, ref string) why.Pod {
	t.Helper()
	p, err := why.Find(pods, ref)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
