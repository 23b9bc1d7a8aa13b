package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestNetworkPolicyRegistry: the networkpolicy mode without Kubernetes.
// gvs-master with its embedded etcd, pods attached by CNI; an
// administrator applies NetworkPolicies (kubectl's YAML) and sets labels
// with gvsctl, and both nodes enforce them: a namespace's deny-all, a
// namespace selector on labels set with gvsctl, a pod selector on a pod of
// the other node (its address comes from that node's record), a named
// port; removing a label withdraws what it allowed; a policy gvs would
// refuse is refused by gvsctl and nothing of its file is stored; deleting
// the policies restores everything.
func TestNetworkPolicyRegistry(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := up(t, "npr", cluster.Spec{
		// Per node: p1 default, p2 alpha, p3 beta.
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}},
		Mode:         "networkpolicy",
		ControlPlane: cluster.ControlPlaneEmbedded,
		CNI:          true,
	})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	def1, alpha1, beta1 := n1.Pods[0], n1.Pods[1], n1.Pods[2]
	def2, alpha2, beta2 := n2.Pods[0], n2.Pods[1], n2.Pods[2]
	if alpha1.Project != "alpha" || beta2.Project != "beta" || def2.Project != "default" {
		t.Fatalf("unexpected projects: %s %s %s", alpha1.Project, beta2.Project, def2.Project)
	}
	checkReach(t, c, "no policy: everything reaches everything")

	gvsctl := func(args ...string) string {
		t.Helper()
		out, err := c.RegistryCtl(ctx(t), args...)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	apply := func(name, yaml string, args ...string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		gvsctl(append([]string{"policy", "apply", "-f", f}, args...)...)
	}
	ping, tcp, expect := policyTools(t, c, alpha2)
	ip := func(p cluster.Pod) string { return p.IP.String() }

	// alpha denies all ingress (a file without a namespace, -n alpha).
	apply("deny", `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: deny-all
spec:
  podSelector: {}
  policyTypes: [Ingress]
`, "-n", "alpha")
	expect("alpha denies ingress", []reachProbe{
		{"beta n1 → alpha n2", func() bool { return ping(beta1.Pod, ip(alpha2)) }, false},
		{"alpha n1 → alpha n2", func() bool { return ping(alpha1.Pod, ip(alpha2)) }, false},
		{"default n2 → alpha n2 (same node)", func() bool { return ping(def2.Pod, ip(alpha2)) }, false},
		{"alpha n1 → beta n2 (and its reply)", func() bool { return ping(alpha1.Pod, ip(beta2)) }, true},
		{"node n2 → alpha n2 (kubelet probes)", func() bool { return ping(lab.Pod{NS: n2.NS}, ip(alpha2)) }, true},
	})

	// alpha admits namespaces labelled team=blue; beta gets the label.
	apply("blue", `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: from-blue
  namespace: alpha
spec:
  podSelector: {}
  ingress:
  - from:
    - namespaceSelector:
        matchLabels: {team: blue}
`)
	expect("alpha admits team=blue, nobody has it", []reachProbe{
		{"beta n1 → alpha n2", func() bool { return ping(beta1.Pod, ip(alpha2)) }, false},
	})
	gvsctl("label", "namespace", "beta", "team=blue")
	expect("beta is team=blue", []reachProbe{
		{"beta n1 → alpha n2", func() bool { return ping(beta1.Pod, ip(alpha2)) }, true},
		{"beta n2 → alpha n1", func() bool { return ping(beta2.Pod, ip(alpha1)) }, true},
		{"default n1 → alpha n2", func() bool { return ping(def1.Pod, ip(alpha2)) }, false},
	})

	// alpha's server on n2 admits pods labelled role=client on its named
	// port web (TCP 5201); alpha's pod on n1 becomes one: n2 finds its
	// address in n1's record.
	gvsctl("label", "pod", "alpha/"+alpha2.Name, "role=server", "port", "web=tcp/5201")
	apply("web", `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: alpha}
spec:
  podSelector:
    matchLabels: {role: server}
  ingress:
  - from:
    - podSelector:
        matchLabels: {role: client}
    ports:
    - port: web
`)
	expect("no client yet", []reachProbe{
		{"alpha n1 → alpha n2 TCP 5201", func() bool { return tcp(alpha1.Pod, ip(alpha2)) }, false},
	})
	gvsctl("label", "pod", "alpha/"+alpha1.Name, "role=client")
	expect("a pod selector on another node's pod, a named port", []reachProbe{
		{"alpha n1 → alpha n2 TCP 5201", func() bool { return tcp(alpha1.Pod, ip(alpha2)) }, true},
		{"alpha n1 → alpha n2 ping", func() bool { return ping(alpha1.Pod, ip(alpha2)) }, false},
		{"default n1 → alpha n2 TCP 5201", func() bool { return tcp(def1.Pod, ip(alpha2)) }, false},
	})
	gvsctl("label", "pod", "alpha/"+alpha1.Name, "role-")
	expect("the client label removed", []reachProbe{
		{"alpha n1 → alpha n2 TCP 5201", func() bool { return tcp(alpha1.Pod, ip(alpha2)) }, false},
	})

	// gvsctl shows what is stored, and refuses a file with one bad
	// policy without storing its good one.
	if out := gvsctl("policy", "get", "-n", "alpha"); strings.Count(out, "alpha ") != 3 {
		t.Errorf("policy get -n alpha:\n%s", out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: good, namespace: beta}
spec: {podSelector: {}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: bad, namespace: beta}
spec:
  podSelector:
    matchExpressions: [{key: a, operator: Sometimes}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := c.RegistryCtl(ctx(t), "policy", "apply", "-f", bad); err == nil {
		t.Errorf("a bad policy was applied:\n%s", out)
	}
	if out := gvsctl("policy", "get", "-n", "beta"); strings.Contains(out, "good") {
		t.Errorf("the good policy of a refused file was stored:\n%s", out)
	}
	expect("beta unaffected by the refused file", []reachProbe{
		{"default n1 → beta n2", func() bool { return ping(def1.Pod, ip(beta2)) }, true},
	})
	if out := gvsctl("labels"); !strings.Contains(out, "namespace/beta\tteam=blue") || !strings.Contains(out, "port web=tcp/5201") {
		t.Errorf("gvsctl labels:\n%s", out)
	}

	gvsctl("policy", "delete", "-n", "alpha", "deny-all", "from-blue", "web")
	checkReach(t, c, "policies deleted: everything reaches everything")
}
