package vswitch

import (
	"fmt"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/netpol"
)

// BenchmarkOpenShiftPodToPod: a batch of 64 UDP frames of 64 flows from one
// local pod to another of its project, through the whole OpenShift rule
// program of a multitenant node (sdn.Program). "tracked" is the program as
// generated, whose table 0 sends every packet to the cluster network
// through the connection tracker first (services: docs/openshift-rules.md);
// "untracked" is the same program without that rule, as before. The
// difference is what the services' connection state costs every packet.
//
// "networkpolicy" is a node in networkpolicy mode (all IP tracked and
// committed) whose destination pod is selected by a NetworkPolicy that
// admits the source pod by label (sdn/netpol), with 49 more policies in
// other namespaces: what NetworkPolicy costs a packet of an allowed flow.
//
// "accounting" is "tracked" with flow export on (sdn.NodeConfig.Accounting
// and a tracker with Accounting): table 81 commits each delivered packet's
// connection, for its counts.
func BenchmarkOpenShiftPodToPod(b *testing.B) {
	for _, variant := range []string{"tracked", "untracked", "networkpolicy", "accounting"} {
		b.Run(variant, func(b *testing.B) { benchBatch(b, openShiftWorker(b, variant)) })
	}
}

// openShiftWorker returns a worker for local pod 0's port of a churnNode
// with 100 pods, loaded with a batch to pod 50 (same VNID).
func openShiftWorker(tb testing.TB, variant string) *worker {
	tb.Helper()
	var pods []sdn.Pod
	for i := range 100 {
		pods = append(pods, churnPod(i))
	}
	node := churnNode
	if variant == "networkpolicy" {
		node.Mode = sdn.ModeNetworkPolicy
	}
	node.Accounting = variant == "accounting"
	rs, err := sdn.Program(node, pods, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if variant == "networkpolicy" {
		rs = append(rs, policyRules(tb, pods)...)
	}
	if variant == "untracked" {
		rs = slicesDeleteFunc(rs, func(r *flowtable.Rule) bool {
			return r.Table == sdn.TableClassify && r.Priority == 1000
		})
	}
	tbl := flowtable.New(flowtable.Config{})
	if err := tbl.Add(rs...); err != nil {
		tb.Fatal(err)
	}
	ct, err := conntrack.New(conntrack.Config{MaxEntries: 1024, Accounting: node.Accounting})
	if err != nil {
		tb.Fatal(err)
	}
	sw, err := New(Config{Table: tbl, Conntrack: ct})
	if err != nil {
		tb.Fatal(err)
	}
	src, dst := churnPod(0), churnPod(50)
	sink := &discardPort{}
	m := portMap{
		src.Port: {no: src.Port, q: []Port{sink}},
		dst.Port: {no: dst.Port, q: []Port{sink}},
	}
	sw.ports.Store(&m)
	w := sw.newWorker(m[src.Port], sink)
	for i := range w.bufs {
		f := udpCT(src.IP.As4(), dst.IP.As4(), uint16(10000+i), 53, "0123456789abcdef")
		copy(f[6:12], []byte{0x0a, 0x58, 10, 128, 0, 2})
		w.meta[i] = port.Meta{Size: copy(w.bufs[i][Headroom:], f)}
	}
	w.process(len(w.bufs))
	if sink.n != len(w.bufs) {
		tb.Fatalf("%d of %d frames delivered", sink.n, len(w.bufs))
	}
	return w
}

// policyRules compiles 50 NetworkPolicies, one per namespace, each
// selecting the namespace's pods labelled role=server and admitting those
// labelled role=client (pods 0–49 are clients, 50–99 servers), for every
// local pod.
func policyRules(tb testing.TB, pods []sdn.Pod) []*flowtable.Rule {
	tb.Helper()
	c := netpol.NewCluster()
	for i, p := range pods {
		role := "client"
		if i >= 50 {
			role = "server"
		}
		c.SetNamespace(netpol.Namespace{Name: p.Namespace, VNID: p.VNID})
		c.SetPod(netpol.Pod{Namespace: p.Namespace, Name: p.Name, IP: p.IP, Labels: map[string]string{"role": role}})
	}
	for n := range 50 {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", n), Name: "servers"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "server"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
					PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}}}}}}}}
		if err := c.SetPolicy(np); err != nil {
			tb.Fatal(err)
		}
	}
	var out []*flowtable.Rule
	for _, p := range pods {
		pp, _ := c.Pod(p.Namespace, p.Name)
		in, eg, err := c.PodRules(pp)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(append(out, in...), eg...)
	}
	if len(out) == 0 {
		tb.Fatal("no policy rules")
	}
	return out
}

func slicesDeleteFunc(rs []*flowtable.Rule, del func(*flowtable.Rule) bool) []*flowtable.Rule {
	out := rs[:0]
	for _, r := range rs {
		if !del(r) {
			out = append(out, r)
		}
	}
	return out
}
