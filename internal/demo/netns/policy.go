package netns

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// egressFirewall shows OpenShift's egress firewall in Kubernetes mode: an
// EgressNetworkPolicy in project alpha denies the external host, which
// alpha's pod can then no longer reach while beta's still can. The policy
// is deleted again at the end.
func (r *run) egressFirewall(ctx context.Context) {
	c := r.c
	res := &r.res.EgressFirewall
	ext := c.Lab.External
	alpha, beta := c.Nodes[1].Pods[1], c.Nodes[1].Pods[2]
	r.step(fmt.Sprintf("egress firewall: an EgressNetworkPolicy in alpha denies the external host %s", ext.IP))
	srv, err := r.startServer(ctx, ext.NS, "ext-fw.log", 5202)
	if err != nil {
		r.fail(err.Error())
		return
	}
	defer srv.Stop()
	net, err := networkv1.NewForConfig(c.Kube.Admin())
	if err != nil {
		r.fail(err.Error())
		return
	}
	enp := &networkv1.EgressNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "default"},
		Spec: networkv1.EgressNetworkPolicySpec{Egress: []networkv1.EgressNetworkPolicyRule{
			{Type: networkv1.EgressNetworkPolicyRuleDeny, To: networkv1.EgressNetworkPolicyPeer{CIDRSelector: ext.IP.String() + "/32"}}}}}
	if _, err := net.EgressNetworkPolicies("alpha").Create(ctx, enp); err != nil {
		r.fail(err.Error())
		return
	}
	defer func() { _ = net.EgressNetworkPolicies("alpha").Delete(ctx, "default", metav1.DeleteOptions{}) }()
	reaches := func(p cluster.Pod) bool {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, p.NS, r.bench(), "tcp-client", "-c", ext.IP.String()+":5202", "-bytes", "100000")
		return err == nil && strings.Contains(string(out), "intact=true")
	}
	// The rules follow the API server within a second or so.
	if eventually(ctx, 10*time.Second, 200*time.Millisecond, func() bool { return !reaches(alpha) }) {
		res.AlphaBlocked = true
		r.printf("    %s (alpha) → %s: blocked by table 100\n", alpha.Name, ext.IP)
	} else {
		r.fail("alpha's pod still reached the external host under a denying egress firewall")
	}
	if reaches(beta) {
		res.BetaReached = true
		r.printf("    %s (beta) → %s: reached (beta has no firewall)\n", beta.Name, ext.IP)
	} else {
		r.fail("beta's pod did not reach the external host")
	}
}

// policyWant is what alpha's NetworkPolicies admit: alpha's pods only from
// alpha's pods; every other pod from everyone (no policy selects it).
func policyWant(from, to cluster.Pod) bool { return to.Project != "alpha" || from.Project == "alpha" }

// networkPolicy shows the networkpolicy mode: project alpha gets a default
// deny for ingress and a policy admitting its own namespace, made through
// the API server; the reachability matrix is then compared with what the
// policies say (replies always pass). The policies stay.
func (r *run) networkPolicy(ctx context.Context) {
	c := r.c
	r.step("NetworkPolicy: alpha denies all ingress, then admits its own namespace (namespaceSelector kubernetes.io/metadata.name=alpha)")
	kc, err := kubernetes.NewForConfig(c.Kube.Admin())
	if err != nil {
		r.fail(err.Error())
		return
	}
	for _, np := range []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "deny-all"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "from-alpha"},
			Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "alpha"}}}}}}}},
	} {
		if _, err := kc.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			r.fail(err.Error())
			return
		}
	}
	var m cluster.Matrix
	for start := time.Now(); ; { // the policies reach both nodes within a second or so
		m = c.Reachability(ctx)
		setWant(m, policyWant)
		if len(m.Mismatches()) == 0 || time.Since(start) > 10*time.Second {
			break
		}
	}
	m.Print(r.cfg.Out)
	r.res.Policy = m
	if bad := m.Mismatches(); len(bad) > 0 {
		r.res.Problems = append(r.res.Problems, bad...)
		return
	}
	r.printf("    as the policies say: alpha's pods admit only alpha's pods; everything else is open (no policy selects it)\n")
}

// setWant fills m.Want from want (a pod always reaches itself).
func setWant(m cluster.Matrix, want func(from, to cluster.Pod) bool) {
	for i, a := range m.Pods {
		for j, b := range m.Pods {
			m.Want[i][j] = i == j || want(a, b)
		}
	}
}
