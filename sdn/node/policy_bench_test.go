package node_test

import (
	"fmt"
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/netpol"
	"github.com/gvswitch/gvs/sdn/node"
)

// BenchmarkPolicyUpdate: a node in networkpolicy mode of a cluster with
// 1 000 pods (100 of them local) in 100 namespaces and 1 000
// NetworkPolicies (10 per namespace, each selecting one app's pods and
// admitting another app's from its namespace and the pods of a team of
// namespaces on port 8080). Reported: the node's policy rules, and the
// time to apply one policy change (a policy replaced: the pods of its
// namespace recompiled, their changed rules swapped in one table update).
func BenchmarkPolicyUpdate(b *testing.B) {
	cfg := sdn.NodeConfig{NodeName: "n1", NodeIP: netip.MustParseAddr("192.168.0.1"), Subnet: netip.MustParsePrefix("10.128.0.0/23"),
		ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")}, ServiceNetwork: netip.MustParsePrefix("172.30.0.0/16"),
		Mode: sdn.ModeNetworkPolicy}
	projects := map[string]uint32{}
	for n := range 100 {
		projects[fmt.Sprint("ns", n)] = uint32(10 + n)
	}
	table := flowtable.New(flowtable.Config{})
	p, err := node.New(node.Config{Table: table, Node: cfg, Projects: projects})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Setup(); err != nil {
		b.Fatal(err)
	}
	for n := range 100 {
		ns := fmt.Sprint("ns", n)
		if err := p.SetNamespaceLabels(ns, map[string]string{"team": fmt.Sprint(n % 10)}); err != nil {
			b.Fatal(err)
		}
	}
	policy := func(n, k int, port int32) *networkingv1.NetworkPolicy {
		pt := intstrPort(port)
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprint("ns", n), Name: fmt.Sprint("p", k)},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprint(k)}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{
						{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprint((k + 1) % 10)}}},
						{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprint(k)}}},
					},
					Ports: []networkingv1.NetworkPolicyPort{pt}}}}}
	}
	for n := range 100 {
		for k := range 10 {
			if err := p.SetPolicy(policy(n, k, 8080)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range 1000 {
		ns := fmt.Sprint("ns", i%100)
		// Local pods in 10.128.0.0/23, the others on other nodes.
		ip := netip.AddrFrom4([4]byte{10, 129 + byte(i/250), byte(i % 250), 2})
		if i < 100 {
			ip = netip.AddrFrom4([4]byte{10, 128, 0, byte(2 + i)})
			if _, err := p.AddPod(sdn.Pod{Name: fmt.Sprint("pod", i), Namespace: ns, IP: ip, Port: sdn.FirstPodPort + uint32(i)}); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.SetPolicyPod(netpol.Pod{Namespace: ns, Name: fmt.Sprint("pod", i), IP: ip, Labels: map[string]string{"app": fmt.Sprint(i % 10)}}); err != nil {
			b.Fatal(err)
		}
	}
	rules := 0
	for _, n := range p.PolicyRules() {
		rules += n
	}
	all := len(table.Rules())
	for i := 0; b.Loop(); i++ {
		// Replace a policy with one on another port, and back.
		if err := p.SetPolicy(policy(i%100, i%10, int32(8080+i%2))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rules), "policy-rules")
	b.ReportMetric(float64(all), "table-rules")
}

func intstrPort(n int32) networkingv1.NetworkPolicyPort {
	p := intstr.FromInt32(n)
	return networkingv1.NetworkPolicyPort{Port: &p}
}
