package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn/pki"
)

// TestConsoleKubeTenant: the console of gvs-master in the Kubernetes mode
// (a real API server, cluster.ControlPlaneKube) asked with curl from the
// second node's namespace. A request without a token, or with a token the
// API server does not know, is refused and shows nothing of the cluster; a
// tenant's token (a ServiceAccount of project alpha that may list alpha's
// pods and nothing else) sees alpha's pods and nothing of beta, of the
// global project or of the nodes, on every page and on the event stream;
// a token that may list every pod sees the whole cluster, the matrix and
// the "why" page (traced on the nodes' endpoints, served with
// certificates of gvs-master's CA) and the pods' traffic.
func TestConsoleKubeTenant(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	kubetest.Require(t)
	// The nodes serve their trace endpoints with certificates of
	// gvs-master's CA (traceTLS), issued as an operator would: the
	// console traces with gvs-master's own certificate of that CA.
	dataDir, certs := t.TempDir(), t.TempDir()
	issue := func(kind, name, out string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "gvs-master"), "cert", kind, name,
			"-pki-dir", filepath.Join(dataDir, "pki"), "-out", out, "-no-authorize")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gvs-master cert %s %s: %v\n%s", kind, name, err, b)
		}
	}
	issue("admin", pki.AdminUser, filepath.Join(certs, "admin")) // makes the CA
	c := up(t, "cnk", cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}},
		Mode:         "multitenant",
		ControlPlane: cluster.ControlPlaneKube,
		CNI:          true,
		MasterArgs: []string{"--console-addr", fmt.Sprintf("%s:%d", labNodeIP(t), consolePort),
			"--data-dir", dataDir},
		Configure: func(_ *cluster.Cluster, _ int, cfg *daemon.Config) {
			dir := filepath.Join(certs, cfg.NodeName)
			issue("node", cfg.NodeName, dir)
			cfg.TraceTLS = pki.Dir(dir).Files("tls")
		},
	})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	alpha1, beta1, beta2 := n1.Pods[1], n1.Pods[2], n2.Pods[2]
	if alpha1.Project != "alpha" || beta2.Project != "beta" {
		t.Fatalf("unexpected projects %s, %s", alpha1.Project, beta2.Project)
	}
	kc, err := kubernetes.NewForConfig(c.Kube.Admin())
	if err != nil {
		t.Fatal(err)
	}
	// alice may list alpha's pods; ops may list every pod.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "pod-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := kc.RbacV1().Roles("alpha").Create(ctx(t), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice, err := c.Kube.ServiceAccountConfig(ctx(t), "alpha", "alice")
	if err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "alice-reads-pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "alpha", Name: "alice"}}}
	if _, err := kc.RbacV1().RoleBindings("alpha").Create(ctx(t), rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gvs-console-test-pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}}}
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx(t), cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ops, err := c.Kube.ServiceAccountConfig(ctx(t), "default", "ops")
	if err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gvs-console-test-ops"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "ops"}}}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx(t), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ca := filepath.Join(masterDataDir(t, c), "pki", "ca.crt")
	get := func(path, token string, extra ...string) (int, string) {
		t.Helper()
		argv := []string{"curl", "-sS", "--cacert", ca, "-o", "-", "-w", "\n%{http_code}"}
		if token != "" {
			argv = append(argv, "-H", "Authorization: Bearer "+token)
		}
		argv = append(append(argv, extra...), consoleURL(c)+path)
		out, err := c.Lab.Exec(ctx(t), n2.NS, argv...)
		// --max-time ends the event stream with status 28.
		if err != nil && !strings.Contains(strings.Join(extra, " "), "--max-time") {
			t.Fatalf("curl %s: %v\n%s", path, err, out)
		}
		body, code := string(out), ""
		if i := strings.LastIndex(body, "\n"); i >= 0 {
			body, code = body[:i], body[i+1:]
		}
		var n int
		fmt.Sscan(code, &n)
		return n, body
	}
	hidden := []string{"beta", beta1.Name, beta2.Name, beta2.IP.String(), "data-node=", n1.IP.String(), `data-project="default"`}

	var code int
	var body string
	testutil.WaitFor(t, 30*time.Second, "the console to answer", func() (bool, error) {
		code, body = get("/", "", "--max-time", "3")
		return code != 0, nil
	})
	for _, path := range []string{"/", "/pods", "/policies", "/matrix", "/why"} {
		for _, tok := range []string{"", "not-a-token"} {
			code, body = get(path, tok)
			if code != 401 && code != 403 {
				t.Errorf("GET %s with token %q: %d, want 401 or 403", path, tok, code)
			}
			if strings.Contains(body, "alpha") || strings.Contains(body, "10.12") {
				t.Errorf("GET %s with token %q shows the cluster:\n%s", path, tok, body)
			}
		}
	}

	for _, path := range []string{"/", "/pods", "/policies", "/matrix", "/why"} {
		code, body = get(path, alice.BearerToken)
		if code != 200 {
			t.Fatalf("alice GET %s: %d\n%s", path, code, body)
		}
		for _, h := range hidden {
			if strings.Contains(body, h) {
				t.Errorf("alice GET %s shows %q (another project or the nodes):\n%s", path, h, body)
			}
		}
	}
	if _, body = get("/pods", alice.BearerToken); !strings.Contains(body, "alpha/"+alpha1.Name) {
		t.Errorf("alice does not see her own pod alpha/%s:\n%s", alpha1.Name, body)
	}
	_, body = get("/events?page=pods", alice.BearerToken, "--max-time", "5")
	if !strings.Contains(body, "event: main") || !strings.Contains(body, "alpha/"+alpha1.Name) {
		t.Errorf("alice's event stream: no update of her pods:\n%s", body)
	}
	for _, h := range hidden {
		if strings.Contains(body, h) {
			t.Errorf("alice's event stream shows %q:\n%s", h, body)
		}
	}

	code, body = get("/pods", ops.BearerToken)
	if code != 200 || !strings.Contains(body, "beta/"+beta2.Name) || !strings.Contains(body, "alpha/"+alpha1.Name) {
		t.Errorf("ops (may list every pod): %d, want every project's pods:\n%s", code, body)
	}
	if _, body = get("/", ops.BearerToken); !strings.Contains(body, `data-node="`+n2.Name+`"`) {
		t.Errorf("ops: no nodes on the map:\n%s", body)
	}
	// ops sees the whole cluster, so the traces: the matrix and the why
	// page from the nodes' tables, and the pods' counters.
	alpha2 := n2.Pods[1]
	_, body = get("/matrix?target=tcp/8080", ops.BearerToken)
	for _, want := range []string{
		fmt.Sprintf(`class="yes" data-from="alpha/%s" data-to="alpha/%s"`, alpha1.Name, alpha2.Name),
		fmt.Sprintf(`class="no" data-from="alpha/%s" data-to="beta/%s"`, alpha1.Name, beta2.Name),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("ops's matrix: no %s:\n%s", want, body)
		}
	}
	_, body = get(fmt.Sprintf("/why?from=alpha/%s&to=beta/%s&target=tcp/8080", alpha1.Name, beta2.Name), ops.BearerToken)
	want := fmt.Sprintf("VNID %d may not reach VNID %d (table 80, node %s)", alpha1.VNID, beta2.VNID, n2.Name)
	if !strings.Contains(body, "BLOCKED") || !strings.Contains(body, want) {
		t.Errorf("ops's why alpha → beta: want BLOCKED and %q:\n%s", want, body)
	}
	if _, body = get("/pods", ops.BearerToken); strings.Contains(body, "no counters") || !strings.Contains(body, " pkts") {
		t.Errorf("ops's pods: no traffic counters:\n%s", body)
	}
}

// masterDataDir is the --data-dir of c's gvs-master (MasterArgs).
func masterDataDir(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	for i, a := range c.Spec.MasterArgs {
		if a == "--data-dir" && i+1 < len(c.Spec.MasterArgs) {
			return c.Spec.MasterArgs[i+1]
		}
	}
	t.Fatal("gvs-master has no --data-dir")
	return ""
}
