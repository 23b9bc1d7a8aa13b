package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/why"
)

// TestWhy: gvsctl why across two nodes of a registry-mode cluster, over
// the nodes' trace endpoints (sdn/why). In the multitenant mode a pair of
// one project is allowed and a pair of two projects is refused by VNID
// isolation in the destination node's table 80; in the networkpolicy mode
// a pair is refused by a NetworkPolicy written in the registry (gvsctl
// policy apply). Each time the whole ICMP matrix gvsctl why --matrix
// computes from the tables is checked against real pings; the answer is
// the same from either node and from a host outside the cluster; and the
// endpoints refuse a node's certificate (a stolen node credential). (The
// refusal of write commands, of clients without a certificate or with
// another CA's is tested in sdn/why.)
func TestWhy(t *testing.T) {
	needRoot(t)
	t.Parallel() // its labs are its own (internal/e2e/doc.go)
	t.Run("multitenant", func(t *testing.T) {
		c := up(t, "wy", cluster.Spec{
			Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}, External: true},
			Mode:         "multitenant",
			ControlPlane: cluster.ControlPlaneEmbedded,
			CNI:          true,
		})
		checkReach(t, c, "multitenant") // also reads the projects' VNIDs into c's pods
		n1, n2 := c.Nodes[0], c.Nodes[1]
		alpha1, alpha2, beta2 := n1.Pods[1], n2.Pods[1], n2.Pods[2]
		if alpha1.Project != "alpha" || beta2.Project != "beta" || alpha1.VNID == beta2.VNID {
			t.Fatalf("unexpected projects: %s (VNID %d), %s (VNID %d)", alpha1.Project, alpha1.VNID, beta2.Project, beta2.VNID)
		}

		a := askWhy(t, c, n1.NS, alpha1, alpha2, "tcp/8080")
		if !a.Allowed {
			t.Errorf("alpha n1 → alpha n2 refused: %s", a.Reason)
		}
		if st, ok := a.DecidingStep(); !ok || st.Node != n2.Name || st.Table != 80 {
			t.Errorf("alpha → alpha decided by %+v, want table 80 on %s", st, n2.Name)
		}
		a = askWhy(t, c, n1.NS, alpha1, beta2, "tcp/8080")
		want := fmt.Sprintf("VNID %d may not reach VNID %d (table 80, node %s)", alpha1.VNID, beta2.VNID, n2.Name)
		if a.Allowed || a.Reason != want {
			t.Errorf("alpha n1 → beta n2: allowed=%v %q, want refused: %q", a.Allowed, a.Reason, want)
		}
		sameEverywhere(t, c, alpha1, beta2, "tcp/8080")
		matrixMatchesPings(t, c)
		refusals(t, c)
	})

	t.Run("networkpolicy", func(t *testing.T) {
		c := up(t, "wyk", cluster.Spec{
			Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}},
			Mode:         "networkpolicy",
			ControlPlane: cluster.ControlPlaneEmbedded,
			CNI:          true,
		})
		n1, n2 := c.Nodes[0], c.Nodes[1]
		alpha1, beta1, alpha2, beta2 := n1.Pods[1], n1.Pods[2], n2.Pods[1], n2.Pods[2]
		applyWebFromBeta(t, c)
		// The nodes apply it when they see it: ask until they have.
		var a why.Answer
		for range 50 {
			if a = askWhy(t, c, n1.NS, beta1, alpha2, "tcp/8080"); !a.Allowed {
				break
			}
		}
		if want := "dropped by NetworkPolicy alpha/web-from-beta in table 80 on node " + n2.Name + ": it selects alpha/"; a.Allowed ||
			!strings.HasPrefix(a.Reason, want) || !strings.HasSuffix(a.Reason, "allows no tcp/8080 from beta/"+beta1.Name) {
			t.Errorf("beta n1 → alpha n2 tcp/8080: allowed=%v %q, want dropped by alpha's policy on %s", a.Allowed, a.Reason, n2.Name)
		}
		if a = askWhy(t, c, n1.NS, beta1, alpha2, "tcp/80"); !a.Allowed {
			t.Errorf("beta n1 → alpha n2 tcp/80 refused: %s", a.Reason)
		}
		if a = askWhy(t, c, n1.NS, alpha1, beta2, "tcp/8080"); !a.Allowed {
			t.Errorf("alpha n1 → beta n2 (no policy selects beta) refused: %s", a.Reason)
		}
		sameEverywhere(t, c, beta1, alpha2, "tcp/8080")
		matrixMatchesPings(t, c)
	})

	// Kubernetes mode: the nodes serve their endpoints with certificates
	// of a gvs cluster CA given to them as files (traceTLS), issued with
	// gvs-master cert as an operator would; gvsctl finds the nodes in the
	// HostSubnets.
	t.Run("kubernetes", func(t *testing.T) {
		kubetest.Require(t)
		pkiDir, certs := t.TempDir(), t.TempDir()
		issue := func(kind, name, out string) {
			t.Helper()
			cmd := exec.Command(filepath.Join(binDir, "gvs-master"), "cert", kind, name, "-pki-dir", pkiDir, "-out", out, "-no-authorize")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("gvs-master cert %s %s: %v\n%s", kind, name, err, b)
			}
		}
		adminDir := filepath.Join(certs, "admin")
		issue("admin", pki.AdminUser, adminDir)
		c := up(t, "wyq", cluster.Spec{
			Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}},
			Mode:         "multitenant",
			ControlPlane: cluster.ControlPlaneKube,
			CNI:          true,
			Configure: func(_ *cluster.Cluster, _ int, cfg *daemon.Config) {
				dir := filepath.Join(certs, cfg.NodeName)
				issue("node", cfg.NodeName, dir)
				cfg.TraceTLS = pki.Dir(dir).Files("tls")
			},
		})
		n1, n2 := c.Nodes[0], c.Nodes[1]
		alpha1, alpha2, beta2 := n1.Pods[1], n2.Pods[1], n2.Pods[2]
		kubeWhy := func(tlsDir string, args ...string) ([]byte, error) {
			argv := append([]string{filepath.Join(c.Spec.BinDir, "gvsctl"), "--kubeconfig", c.KubeAdmin, "--trace-tls", tlsDir}, args...)
			return c.Lab.Exec(ctx(t), n1.NS, argv...)
		}
		ask := func(from, to cluster.Pod) why.Answer {
			t.Helper()
			out, err := kubeWhy(adminDir, "-o", "json", "why", from.IP.String(), to.IP.String(), "tcp/8080")
			if err != nil {
				t.Fatalf("gvsctl --kubeconfig why: %v\n%s", err, out)
			}
			var a why.Answer
			if err := json.Unmarshal(out, &a); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Logf("%s → %s: allowed=%v: %s", a.Question.From, a.Question.To, a.Allowed, a.Reason)
			return a
		}
		if a := ask(alpha1, alpha2); !a.Allowed {
			t.Errorf("alpha n1 → alpha n2 refused: %s", a.Reason)
		}
		want := fmt.Sprintf("VNID %d may not reach VNID %d (table 80, node %s)", alpha1.VNID, beta2.VNID, n2.Name)
		if a := ask(alpha1, beta2); a.Allowed || a.Reason != want {
			t.Errorf("alpha n1 → beta n2: allowed=%v %q, want %q", a.Allowed, a.Reason, want)
		}
		// A node's certificate gets nothing.
		out, err := kubeWhy(filepath.Join(certs, n2.Name), "why", "--matrix")
		if err == nil || !strings.Contains(string(out), "remote error: tls: bad certificate") {
			t.Errorf("gvsctl why with node %s's certificate: %v\n%s; want a refusal in the TLS handshake", n2.Name, err, out)
		}
	})
}

// whyCtl runs gvsctl with the registry's endpoints and the certificate in
// tls (the administrator's when zero) in namespace ns.
func whyCtl(t *testing.T, c *cluster.Cluster, ns string, tls pki.Files, args ...string) ([]byte, error) {
	t.Helper()
	if tls.IsZero() {
		tls = c.AdminTLS()
	}
	argv := append([]string{filepath.Join(c.Spec.BinDir, "gvsctl"), "-etcd", strings.Join(c.EtcdEndpoints, ","),
		"-etcd-cacert", tls.CA, "-etcd-cert", tls.Cert, "-etcd-key", tls.Key}, args...)
	return c.Lab.Exec(ctx(t), ns, argv...)
}

// askWhy runs gvsctl why in namespace ns, once by address and once by
// name, and checks both say the same.
func askWhy(t *testing.T, c *cluster.Cluster, ns string, from, to cluster.Pod, target string) why.Answer {
	t.Helper()
	out, err := whyCtl(t, c, ns, pki.Files{}, "-o", "json", "why", from.IP.String(), to.IP.String(), target)
	if err != nil {
		t.Fatalf("gvsctl why %s %s %s: %v\n%s", from.Name, to.Name, target, err, out)
	}
	var a why.Answer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	text, err := whyCtl(t, c, ns, pki.Files{}, "why", a.Question.From.String(), a.Question.To.String(), target)
	if err != nil {
		t.Fatalf("gvsctl why %s %s: %v\n%s", a.Question.From, a.Question.To, err, text)
	}
	if !strings.Contains(string(text), a.Reason) {
		t.Errorf("by name, gvsctl why says\n%s\nnot %q", text, a.Reason)
	}
	t.Logf("gvsctl why %s %s %s:\n%s", a.Question.From, a.Question.To, target, text)
	return a
}

// sameEverywhere: the answer is the same from either node and from the
// external host when there is one.
func sameEverywhere(t *testing.T, c *cluster.Cluster, from, to cluster.Pod, target string) {
	t.Helper()
	where := []string{c.Nodes[0].NS, c.Nodes[1].NS}
	if c.Lab.External != nil {
		where = append(where, c.Lab.External.NS)
	}
	var first why.Answer
	for i, ns := range where {
		a := askWhy(t, c, ns, from, to, target)
		if i == 0 {
			first = a
			continue
		}
		if a.Allowed != first.Allowed || a.Reason != first.Reason || len(a.Steps) != len(first.Steps) || a.Decided != first.Decided {
			t.Errorf("from %s: allowed=%v %q (%d steps, decided %d); from %s: allowed=%v %q (%d steps, decided %d)",
				ns, a.Allowed, a.Reason, len(a.Steps), a.Decided, where[0], first.Allowed, first.Reason, len(first.Steps), first.Decided)
		}
	}
}

// matrixMatchesPings: for every ordered pair of pods, gvsctl why --matrix
// icmp (the tables) says what a ping (the data path) does.
func matrixMatchesPings(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	start := time.Now()
	out, err := whyCtl(t, c, c.Nodes[0].NS, pki.Files{}, "-o", "json", "why", "--matrix", "icmp")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("gvsctl why --matrix: %v\n%s", err, out)
	}
	var m why.Reachability
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	pings := c.Reachability(ctx(t))
	index := map[string]int{}
	for i, p := range m.Pods {
		index[p.IP.String()] = i
	}
	if len(m.Pods) != len(pings.Pods) {
		t.Fatalf("gvsctl why --matrix has %d pods, the lab %d", len(m.Pods), len(pings.Pods))
	}
	var yes, no int
	for i, a := range pings.Pods {
		for j, b := range pings.Pods {
			if i == j {
				continue
			}
			ai, ok1 := index[a.IP.String()]
			bi, ok2 := index[b.IP.String()]
			if !ok1 || !ok2 {
				t.Fatalf("gvsctl why --matrix lacks %s or %s", a.Name, b.Name)
			}
			ans := m.Answers[ai][bi]
			if ans.Error != "" || ans.Allowed != pings.Got[i][j] {
				t.Errorf("%s → %s: the tables say allowed=%v (%s), ping says %v", a.Name, b.Name, ans.Allowed, ans.Reason, pings.Got[i][j])
			}
			if ans.Allowed {
				yes++
			} else {
				no++
			}
		}
	}
	if yes == 0 || no == 0 {
		t.Errorf("the matrix has %d allowed and %d refused pairs; want both", yes, no)
	}
	t.Logf("gvsctl why --matrix icmp (%d pods, %v) agrees with ping on %d allowed and %d refused pairs", len(m.Pods), took.Round(time.Millisecond), yes, no)
}

// refusals: a node's certificate (what a compromised node holds) gets
// nothing from the trace endpoints, from the external host or from a
// node.
func refusals(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	nodeTLS := pki.Dir(c.NodeTLSDir(1)).Files("tls")
	for _, ns := range []string{c.Lab.External.NS, c.Nodes[1].NS} {
		out, err := whyCtl(t, c, ns, nodeTLS, "why", "--matrix")
		if err == nil {
			t.Errorf("gvsctl why with node %s's certificate, from %s, was answered:\n%s", c.Nodes[1].Name, ns, out)
			continue
		}
		if !strings.Contains(string(out), "remote error: tls: bad certificate") {
			t.Errorf("with a node's certificate from %s: %v\n%s; want a refusal in the TLS handshake", ns, err, out)
		}
	}
}

// webFromBeta is a NetworkPolicy by which alpha admits only TCP port 80
// from beta.
const webFromBeta = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: web-from-beta
  namespace: alpha
spec:
  podSelector: {}
  ingress:
  - from:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: beta}
    ports:
    - {protocol: TCP, port: 80}
`

// applyWebFromBeta applies webFromBeta with gvsctl policy apply (the etcd
// registry's networkpolicy mode).
func applyWebFromBeta(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "web.yaml")
	if err := os.WriteFile(f, []byte(webFromBeta), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := c.RegistryCtl(ctx(t), "policy", "apply", "-f", f); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
