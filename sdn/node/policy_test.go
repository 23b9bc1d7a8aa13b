package node_test

import (
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/netpol"
	"github.com/gvswitch/gvs/sdn/node"
)

// TestPolicyEngine: in networkpolicy mode the Program keeps each local
// pod's NetworkPolicy rules current as policies, peers' labels and
// namespaces change, touching only the pods a change concerns.
func TestPolicyEngine(t *testing.T) {
	cfg := testNode()
	cfg.Mode = sdn.ModeNetworkPolicy
	table := flowtable.New(flowtable.Config{})
	p, err := node.New(node.Config{Table: table, Node: cfg, Projects: map[string]uint32{"alpha": 10, "beta": 11}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(); err != nil {
		t.Fatal(err)
	}
	web := sdn.Pod{Name: "web", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.2"), Port: sdn.FirstPodPort}
	cli := sdn.Pod{Name: "cli", Namespace: "beta", IP: netip.MustParseAddr("10.128.0.3"), Port: sdn.FirstPodPort + 1}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.SetPolicyPod(netpol.Pod{Namespace: "alpha", Name: "web", IP: web.IP, Labels: map[string]string{"app": "web"}}))
	for _, pod := range []sdn.Pod{web, cli} {
		if _, err := p.AddPod(pod); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.PolicyRules(); len(got) != 0 {
		t.Fatalf("rules before any policy: %v", got)
	}
	// alpha's web accepts only pods labelled role=client.
	must(p.SetPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "p"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}}}}}}}}))
	in := sdn.IngressCookie(web.IP)
	if n := count(table, in); n != 1 { // the default drop: no client yet
		t.Fatalf("web has %d ingress rules, want 1 (drop)", n)
	}
	gen := table.Snapshot()
	// A pod that is no peer changes nothing (no table update at all).
	must(p.SetPolicyPod(netpol.Pod{Namespace: "beta", Name: "other", IP: netip.MustParseAddr("10.129.0.9"), Labels: map[string]string{"role": "server"}}))
	if table.Snapshot() != gen {
		t.Error("a change that concerns no policy updated the table")
	}
	// A remote client appears: web admits it.
	must(p.SetPolicyPod(netpol.Pod{Namespace: "beta", Name: "rc", IP: netip.MustParseAddr("10.129.0.5"), Labels: map[string]string{"role": "client"}}))
	if n := count(table, in); n != 2 {
		t.Fatalf("after a client appeared web has %d ingress rules, want 2", n)
	}
	// The local cli pod becomes a client too.
	must(p.SetPolicyPod(netpol.Pod{Namespace: "beta", Name: "cli", IP: cli.IP, Labels: map[string]string{"role": "client"}}))
	if n := count(table, in); n != 3 {
		t.Fatalf("after cli became a client web has %d ingress rules, want 3", n)
	}
	if n := count(table, sdn.IngressCookie(cli.IP)); n != 0 {
		t.Errorf("cli, selected by no policy, has %d ingress rules", n)
	}
	// The remote client goes.
	must(p.DeletePolicyPod("beta", "rc"))
	if n := count(table, in); n != 2 {
		t.Fatalf("after the remote client left web has %d ingress rules, want 2", n)
	}
	// web's labels change: no longer selected.
	must(p.SetPolicyPod(netpol.Pod{Namespace: "alpha", Name: "web", IP: web.IP, Labels: map[string]string{"app": "api"}}))
	if n := count(table, in); n != 0 {
		t.Fatalf("unselected web has %d ingress rules", n)
	}
	must(p.SetPolicyPod(netpol.Pod{Namespace: "alpha", Name: "web", IP: web.IP, Labels: map[string]string{"app": "web"}}))
	// The policy goes: every rule of it goes.
	must(p.DeletePolicy("alpha", "p"))
	if n := count(table, in); n != 0 || len(p.PolicyRules()) != 0 {
		t.Fatalf("after the policy was deleted: %d rules, %v", n, p.PolicyRules())
	}
	// A refused policy is an error and installs nothing.
	bad := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "bad"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{"Sideways"}}}
	if err := p.SetPolicy(bad); err == nil {
		t.Error("a bad policy was accepted")
	}
	// Removing the pod removes its policy rules.
	must(p.SetPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "deny"}}))
	if n := count(table, in); n != 1 {
		t.Fatalf("deny-all: %d rules", n)
	}
	must(p.RemovePod(web.IP))
	if n := count(table, in); n != 0 {
		t.Errorf("a removed pod left %d policy rules", n)
	}
}

// TestPolicyEngineOtherModes: outside networkpolicy mode the engine
// records and installs nothing.
func TestPolicyEngineOtherModes(t *testing.T) {
	p, table, _ := newProgram(t, map[string]uint32{"alpha": 10})
	before := len(table.Rules())
	if err := p.SetPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "deny"}}); err != nil {
		t.Fatal(err)
	}
	if len(table.Rules()) != before {
		t.Error("multitenant mode installed policy rules")
	}
}
