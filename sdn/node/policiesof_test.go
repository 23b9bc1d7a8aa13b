package node_test

import (
	"net/netip"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/netpol"
	"github.com/gvswitch/gvs/sdn/node"
)

// TestPoliciesOf: the Program names the policies that select a local pod,
// by direction, as sdn/why shows them for a NetworkPolicy drop; none for
// a pod no policy selects, an unknown address, or another mode.
func TestPoliciesOf(t *testing.T) {
	cfg := testNode()
	cfg.Mode = sdn.ModeNetworkPolicy
	p, err := node.New(node.Config{Table: flowtable.New(flowtable.Config{}), Node: cfg, Projects: map[string]uint32{"alpha": 10}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(); err != nil {
		t.Fatal(err)
	}
	web := sdn.Pod{Name: "web", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.2"), Port: sdn.FirstPodPort}
	db := sdn.Pod{Name: "db", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.3"), Port: sdn.FirstPodPort + 1}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.SetPolicyPod(netpol.Pod{Namespace: "alpha", Name: "web", IP: web.IP, Labels: map[string]string{"app": "web"}}))
	must(p.SetPolicyPod(netpol.Pod{Namespace: "alpha", Name: "db", IP: db.IP, Labels: map[string]string{"app": "db"}}))
	for _, pod := range []sdn.Pod{web, db} {
		if _, err := p.AddPod(pod); err != nil {
			t.Fatal(err)
		}
	}
	selector := func(app string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	must(p.SetPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "web-in"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: selector("web")}}))
	must(p.SetPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "all-in"},
		Spec: networkingv1.NetworkPolicySpec{}}))
	must(p.SetPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "web-out"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: selector("web"), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}))

	in, out := p.PoliciesOf(web.IP)
	if !slices.Equal(in, []string{"alpha/all-in", "alpha/web-in"}) || !slices.Equal(out, []string{"alpha/web-out"}) {
		t.Errorf("web: ingress %v, egress %v", in, out)
	}
	in, out = p.PoliciesOf(db.IP)
	if !slices.Equal(in, []string{"alpha/all-in"}) || len(out) != 0 {
		t.Errorf("db: ingress %v, egress %v", in, out)
	}
	if in, out = p.PoliciesOf(netip.MustParseAddr("10.128.0.99")); in != nil || out != nil {
		t.Errorf("an unknown address: %v %v", in, out)
	}

	cfg.Mode = sdn.ModeMultitenant
	mt, err := node.New(node.Config{Table: flowtable.New(flowtable.Config{}), Node: cfg, Projects: map[string]uint32{"alpha": 10}})
	if err != nil {
		t.Fatal(err)
	}
	if in, out = mt.PoliciesOf(web.IP); in != nil || out != nil {
		t.Errorf("multitenant mode: %v %v", in, out)
	}
}
