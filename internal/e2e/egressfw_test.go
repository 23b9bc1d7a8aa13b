package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// TestEgressFirewall: OpenShift's EgressNetworkPolicy, made through the
// real API server, on two nodes in multitenant mode: a project's pods are
// denied an external host by CIDR while another project's are not; an
// allow by DNS name ahead of a deny-all lets the host through, and when
// the name's record moves the rules follow (the node resolves names with
// the lab's DNS responder every second); deleting the policy restores.
func TestEgressFirewall(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	kubetest.Require(t)
	c := up(t, "ef", cluster.Spec{
		// Per node: p1 default, p2 alpha, p3 beta.
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}, External: true},
		Mode:         "multitenant",
		ControlPlane: cluster.ControlPlaneKube,
		CNI:          true,
		Configure: func(c *cluster.Cluster, _ int, cfg *daemon.Config) {
			cfg.EgressDNSServer = c.Lab.External.IP.String() + ":53"
			cfg.EgressDNSInterval = "1s"
		},
	})
	ext := c.Lab.External
	alpha1, beta1, alpha2 := c.Nodes[0].Pods[1], c.Nodes[0].Pods[2], c.Nodes[1].Pods[1]
	setRecord, expect := egressLab(t, c)
	expect("no firewall", map[*cluster.Pod]bool{&alpha1: true, &beta1: true, &alpha2: true})

	net, err := networkv1.NewForConfig(c.Kube.Admin())
	if err != nil {
		t.Fatal(err)
	}
	enp := &networkv1.EgressNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "default"},
		Spec: networkv1.EgressNetworkPolicySpec{Egress: []networkv1.EgressNetworkPolicyRule{
			{Type: networkv1.EgressNetworkPolicyRuleDeny, To: networkv1.EgressNetworkPolicyPeer{CIDRSelector: ext.IP.String() + "/32"}}}}}
	created, err := net.EgressNetworkPolicies("alpha").Create(ctx(t), enp)
	if err != nil {
		t.Fatal(err)
	}
	expect("alpha denies the host by CIDR", map[*cluster.Pod]bool{&alpha1: false, &alpha2: false, &beta1: true})

	created.Spec.Egress = []networkv1.EgressNetworkPolicyRule{
		{Type: networkv1.EgressNetworkPolicyRuleAllow, To: networkv1.EgressNetworkPolicyPeer{DNSName: "ext.example.com"}},
		{Type: networkv1.EgressNetworkPolicyRuleDeny, To: networkv1.EgressNetworkPolicyPeer{CIDRSelector: "0.0.0.0/0"}},
	}
	updated, err := net.EgressNetworkPolicies("alpha").Update(ctx(t), created)
	if err != nil {
		t.Fatal(err)
	}
	expect("allowed by DNS name, then deny all", map[*cluster.Pod]bool{&alpha1: true, &alpha2: true})

	setRecord("192.0.2.99")
	expect("the name moved away", map[*cluster.Pod]bool{&alpha1: false, &alpha2: false, &beta1: true})
	setRecord(ext.IP.String())
	expect("the name came back", map[*cluster.Pod]bool{&alpha1: true})

	if err := net.EgressNetworkPolicies("alpha").Delete(ctx(t), updated.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	setRecord("192.0.2.99")
	expect("policy deleted", map[*cluster.Pod]bool{&alpha1: true, &alpha2: true})
	if t.Failed() {
		for i := range c.Nodes {
			out, _ := c.Ctl(ctx(t), i, "dump-flows", "table=100")
			t.Logf("--- %s table 100 ---\n%s", c.Nodes[i].Name, out)
		}
	}
}

// TestEgressFirewallRegistry: the same egress firewall in the
// etcd-registry mode, applied with `gvsctl egress-firewall` (OpenShift's
// YAML): a project's pods are denied an external host by CIDR, another
// project's are not; an allow by DNS name ahead of a deny-all lets the
// host through; deleting it restores. gvsctl refuses a firewall the nodes
// could not read and stores nothing of its file.
func TestEgressFirewallRegistry(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := up(t, "efr", cluster.Spec{
		// Per node: p1 default, p2 alpha, p3 beta.
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}, External: true},
		Mode:         "multitenant",
		ControlPlane: cluster.ControlPlaneEmbedded,
		Configure: func(c *cluster.Cluster, _ int, cfg *daemon.Config) {
			cfg.EgressDNSServer = c.Lab.External.IP.String() + ":53"
			cfg.EgressDNSInterval = "1s"
		},
	})
	ext := c.Lab.External
	alpha1, beta1, alpha2 := c.Nodes[0].Pods[1], c.Nodes[0].Pods[2], c.Nodes[1].Pods[1]
	setRecord, expect := egressLab(t, c)
	apply := func(yaml string) ([]byte, error) {
		f := filepath.Join(t.TempDir(), "fw.yaml")
		if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return c.RegistryCtl(ctx(t), "egress-firewall", "apply", "-f", f)
	}
	expect("no firewall", map[*cluster.Pod]bool{&alpha1: true, &beta1: true, &alpha2: true})

	if out, err := apply(`apiVersion: network.openshift.io/v1
kind: EgressNetworkPolicy
metadata: {name: default, namespace: alpha}
spec:
  egress:
  - {type: Deny, to: {cidrSelector: ` + ext.IP.String() + `/32}}
`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	expect("alpha denies the host by CIDR", map[*cluster.Pod]bool{&alpha1: false, &alpha2: false, &beta1: true})

	if out, err := apply(`apiVersion: network.openshift.io/v1
kind: EgressNetworkPolicy
metadata: {name: default, namespace: alpha}
spec:
  egress:
  - {type: Allow, to: {dnsName: ext.example.com}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	expect("allowed by DNS name, then deny all", map[*cluster.Pod]bool{&alpha1: true, &alpha2: true, &beta1: true})

	if out, err := apply(`apiVersion: network.openshift.io/v1
kind: EgressNetworkPolicy
metadata: {name: default, namespace: beta}
spec:
  egress:
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
---
apiVersion: network.openshift.io/v1
kind: EgressNetworkPolicy
metadata: {name: second, namespace: beta}
spec:
  egress:
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0, dnsName: ext.example.com}}
`); err == nil {
		t.Errorf("a firewall with a rule naming both a CIDR and a name was applied:\n%s", out)
	}
	if out, err := c.RegistryCtl(ctx(t), "egress-firewall", "get"); err != nil || strings.Contains(string(out), "beta") ||
		!strings.Contains(string(out), "Allow ext.example.com, Deny 0.0.0.0/0") {
		t.Errorf("egress-firewall get after the refused file: %v\n%s", err, out)
	}
	expect("beta unaffected by the refused file", map[*cluster.Pod]bool{&beta1: true})

	if out, err := c.RegistryCtl(ctx(t), "egress-firewall", "delete", "-n", "alpha", "default"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	setRecord("192.0.2.99")
	expect("firewall deleted", map[*cluster.Pod]bool{&alpha1: true, &alpha2: true})
	if t.Failed() {
		for i := range c.Nodes {
			out, _ := c.Ctl(ctx(t), i, "dump-flows", "table=100")
			t.Logf("--- %s table 100 ---\n%s", c.Nodes[i].Name, out)
		}
	}
}

// egressLab serves the lab's external host for the egress firewall tests:
// a TCP server, and a DNS responder answering ext.example.com with the
// host's address (setRecord changes it). expect checks which pods reach
// the host, each within 15 s.
func egressLab(t *testing.T, c *cluster.Cluster) (setRecord func(ip string), expect func(step string, want map[*cluster.Pod]bool)) {
	t.Helper()
	ext := c.Lab.External
	bench := filepath.Join(binDir, "gvs-bench")
	records := filepath.Join(t.TempDir(), "records")
	setRecord = func(ip string) {
		t.Helper()
		if err := os.WriteFile(records, []byte("ext.example.com "+ip+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setRecord(ext.IP.String())
	for _, argv := range [][]string{{"tcp-server", "-l", ":5201"}, {"dns-serve", "-l", ":53", "-records", records}} {
		p, err := c.Lab.Start(ctx(t), ext.NS, filepath.Join(t.TempDir(), argv[0]+".log"), append([]string{bench}, argv...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop() })
	}
	reaches := func(from cluster.Pod) bool {
		cctx, cancel := context.WithTimeout(ctx(t), 4*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, from.NS, bench, "tcp-client", "-c", ext.IP.String()+":5201", "-bytes", "100000")
		return err == nil && strings.Contains(string(out), "intact=true")
	}
	expect = func(step string, want map[*cluster.Pod]bool) {
		t.Helper()
		for p, w := range want {
			var got bool
			if !testutil.Eventually(15*time.Second, func() bool { got = reaches(*p); return got == w }) {
				t.Errorf("%s: %s (%s) → external host: reached=%v, want %v", step, p.Name, p.Project, got, w)
			}
		}
	}
	return setRecord, expect
}
