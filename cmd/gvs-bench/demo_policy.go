package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// demoEgressFirewall shows OpenShift's egress firewall in Kubernetes mode:
// an EgressNetworkPolicy in project alpha denies the external host, which
// alpha's pod can then no longer reach while beta's still can. It returns
// what went wrong.
func demoEgressFirewall(ctx context.Context, c *cluster.Cluster, bin string, step func(string)) []string {
	var bad []string
	ext := c.Lab.External
	alpha, beta := c.Nodes[1].Pods[1], c.Nodes[1].Pods[2]
	step(fmt.Sprintf("egress firewall: an EgressNetworkPolicy in alpha denies the external host %s", ext.IP))
	srv, err := c.Lab.Start(ctx, ext.NS, filepath.Join(c.Lab.StateDir(), "ext-fw.log"), filepath.Join(bin, "gvs-bench"), "tcp-server", "-l", ":5202")
	if err != nil {
		return append(bad, err.Error())
	}
	defer srv.Stop()
	net, err := networkv1.NewForConfig(c.Kube.Admin())
	if err != nil {
		return append(bad, err.Error())
	}
	enp := &networkv1.EgressNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "default"},
		Spec: networkv1.EgressNetworkPolicySpec{Egress: []networkv1.EgressNetworkPolicyRule{
			{Type: networkv1.EgressNetworkPolicyRuleDeny, To: networkv1.EgressNetworkPolicyPeer{CIDRSelector: ext.IP.String() + "/32"}}}}}
	if _, err := net.EgressNetworkPolicies("alpha").Create(ctx, enp); err != nil {
		return append(bad, err.Error())
	}
	defer func() { _ = net.EgressNetworkPolicies("alpha").Delete(ctx, "default", metav1.DeleteOptions{}) }()
	reaches := func(p cluster.Pod) bool {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, p.NS, filepath.Join(bin, "gvs-bench"), "tcp-client", "-c", ext.IP.String()+":5202", "-bytes", "100000")
		return err == nil && strings.Contains(string(out), "intact=true")
	}
	blocked := false
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(200 * time.Millisecond) {
		if !reaches(alpha) {
			blocked = true
			break
		}
	}
	if blocked {
		fmt.Printf("    %s (alpha) → %s: blocked by table 100\n", alpha.Name, ext.IP)
	} else {
		bad = append(bad, "alpha's pod still reached the external host under a denying egress firewall")
	}
	if reaches(beta) {
		fmt.Printf("    %s (beta) → %s: reached (beta has no firewall)\n", beta.Name, ext.IP)
	} else {
		bad = append(bad, "beta's pod did not reach the external host")
	}
	return bad
}

// demoNetworkPolicy shows the networkpolicy mode: project alpha gets a
// default deny for ingress and a policy admitting its own namespace, made
// through the API server; the reachability matrix is then compared with
// what the policies say (alpha's pods only from alpha's pods; replies
// always pass). The policies stay. It returns what went wrong.
func demoNetworkPolicy(ctx context.Context, c *cluster.Cluster, step func(string)) []string {
	step("NetworkPolicy: alpha denies all ingress, then admits its own namespace (namespaceSelector kubernetes.io/metadata.name=alpha)")
	kc, err := kubernetes.NewForConfig(c.Kube.Admin())
	if err != nil {
		return []string{err.Error()}
	}
	for _, np := range []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "deny-all"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "from-alpha"},
			Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "alpha"}}}}}}}},
	} {
		if _, err := kc.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			return []string{err.Error()}
		}
	}
	want := func(a, b cluster.Pod) bool { return b.Project != "alpha" || a.Project == "alpha" }
	var m cluster.Matrix
	for start := time.Now(); ; { // the policies reach both nodes within a second or so
		m = c.Reachability(ctx)
		for i, a := range m.Pods {
			for j, b := range m.Pods {
				m.Want[i][j] = i == j || want(a, b)
			}
		}
		if len(m.Mismatches()) == 0 || time.Since(start) > 10*time.Second {
			break
		}
	}
	m.Print(os.Stdout)
	if bad := m.Mismatches(); len(bad) > 0 {
		return bad
	}
	fmt.Println("    as the policies say: alpha's pods admit only alpha's pods; everything else is open (no policy selects it)")
	return nil
}
