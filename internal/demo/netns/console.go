package netns

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn/pki"
)

// ConsolePort is the port of gvs-master's web console in the demo, on the
// first node's underlay address.
const ConsolePort = 9443

// consoleAddr is where the demo's gvs-master serves its console: the first
// node's underlay address (node i is at the underlay's address plus
// lab.NodeHostOffset plus i).
func consoleAddr() netip.AddrPort {
	a := Underlay.Addr()
	for range lab.NodeHostOffset + 1 {
		a = a.Next()
	}
	return netip.AddrPortFrom(a, ConsolePort)
}

// consoleArgs are gvs-master's flags for the console; in the Kubernetes
// mode its certificate's CA goes to the lab's state directory (which
// make demo-down removes).
func consoleArgs(cfg Config, kube bool) []string {
	args := []string{"--console-addr", consoleAddr().String()}
	if kube {
		args = append(args, "--data-dir", consoleDataDir(cfg))
	}
	return args
}

func consoleDataDir(cfg Config) string { return filepath.Join(lab.StateRoot, cfg.Prefix, "console") }

// consoleNodeCerts gives each node of the Kubernetes-mode demo a
// certificate of gvs-master's CA for its trace endpoint (traceTLS), issued
// with gvs-master cert node as an operator would, so that the console's
// matrix, "why" page and traffic counters work (the etcd mode's nodes
// have theirs from the cluster CA already). gvs-master made the CA when it
// started, before the nodes are configured.
func consoleNodeCerts(cfg Config) func(*cluster.Cluster, int, *daemon.Config) {
	return func(c *cluster.Cluster, _ int, dc *daemon.Config) {
		dir := filepath.Join(consoleDataDir(cfg), "nodes", dc.NodeName)
		out, err := exec.Command(filepath.Join(cfg.BinDir, "gvs-master"), "cert", "node", dc.NodeName,
			"-pki-dir", filepath.Join(consoleDataDir(cfg), "pki"), "-out", dir, "-no-authorize").CombinedOutput()
		if err != nil {
			// The node serves no trace endpoint then; the console says so.
			fmt.Fprintf(cfg.Out, "    (no trace certificate for %s: %v: %s)\n", dc.NodeName, err, out)
			return
		}
		dc.TraceTLS = pki.Dir(dir).Files("tls")
	}
}

// console checks that the console refuses a request without credentials
// and answers the administrator (etcd mode), then prints how to reach it
// and log in. The console lives in the lab's namespaces only: a browser
// must run in one of them.
func (r *run) console(ctx context.Context, kube bool) {
	c := r.c
	url := "https://" + consoleAddr().String()
	from := c.Nodes[1].NS
	ca := c.AdminTLS().CA
	if kube {
		ca = filepath.Join(consoleDataDir(r.cfg), "pki", "ca.crt")
	}
	r.step("web console: " + url + " (gvs-master, in " + c.Nodes[0].NS + "), asked from " + from)
	curl := []string{"curl", "-sS", "--max-time", "10", "--cacert", ca, "-o", "/dev/null", "-w", "%{http_code}"}
	out, err := c.Lab.Exec(ctx, from, append(curl, url+"/")...)
	code := strings.TrimSpace(string(out))
	r.printf("    without credentials: HTTP %s\n", code)
	if err != nil || code != "401" {
		r.fail(fmt.Sprintf("the console answered a request without credentials with %q (%v), want 401", code, err))
	}
	if kube {
		tok, err := r.consoleToken(ctx)
		if err != nil {
			r.fail("a token for the console: " + err.Error())
			return
		}
		out, err = c.Lab.Exec(ctx, from, append(curl, "-H", "Authorization: Bearer "+tok, url+"/pods")...)
		code = strings.TrimSpace(string(out))
		r.printf("    with the token of ServiceAccount default/%s (may list every pod): HTTP %s\n", consoleViewer, code)
		if err != nil || code != "200" {
			r.fail(fmt.Sprintf("the console refused a token that may list every pod: %q (%v)", code, err))
		}
	} else {
		a := c.AdminTLS()
		out, err = c.Lab.Exec(ctx, from, append(curl, "--cert", a.Cert, "--key", a.Key, url+"/")...)
		code = strings.TrimSpace(string(out))
		r.printf("    with the administrator's certificate: HTTP %s\n", code)
		if err != nil || code != "200" {
			r.fail(fmt.Sprintf("the console refused the administrator's certificate: %q (%v)", code, err))
		}
	}
}

// consoleViewer is the ServiceAccount (namespace default) whose token the
// Kubernetes-mode demo gives for the console: it may list every pod, so it
// sees the whole cluster.
const consoleViewer = "gvs-console-viewer"

// consoleTokenFile is where the demo writes that token (0600).
func (r *run) consoleTokenFile() string {
	return filepath.Join(consoleDataDir(r.cfg), consoleViewer+".token")
}

// consoleToken makes the ServiceAccount consoleViewer, lets it list pods
// in every namespace, writes a token of it (valid an hour) to
// consoleTokenFile and returns it.
func (r *run) consoleToken(ctx context.Context) (string, error) {
	kc, err := kubernetes.NewForConfig(r.c.Kube.Admin())
	if err != nil {
		return "", err
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: consoleViewer},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: consoleViewer},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: consoleViewer},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: consoleViewer}}}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	cfg, err := r.c.Kube.ServiceAccountConfig(ctx, "default", consoleViewer)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(r.consoleTokenFile(), []byte(cfg.BearerToken), 0o600); err != nil {
		return "", err
	}
	return cfg.BearerToken, nil
}

// consoleHelp says how to log in to the console.
func (r *run) consoleHelp(kube bool) string {
	c := r.c
	url := "https://" + consoleAddr().String()
	if kube {
		ca := filepath.Join(consoleDataDir(r.cfg), "pki", "ca.crt")
		return fmt.Sprintf(`Web console (read-only): %[1]s, reachable inside the lab's namespaces only.
  Log in with a bearer token of the API server (the login form, or a header). %[2]s holds a token
  of ServiceAccount default/%[3]s, which may list every pod and so sees the whole cluster (valid an hour;
  a tenant's token sees only the projects whose pods it may list). From the command line:
    ip netns exec %[4]s curl --cacert %[5]s -H "Authorization: Bearer $(cat %[2]s)" %[1]s/pods
  In a browser: run it in a lab namespace, e.g. ip netns exec %[4]s chromium --user-data-dir=$(mktemp -d) %[1]s
  (trust %[5]s, the CA of the console's certificate), and paste the token into the login form.`,
			url, r.consoleTokenFile(), consoleViewer, c.Nodes[1].NS, ca)
	}
	a := c.AdminTLS()
	return fmt.Sprintf(`Web console (read-only): %[1]s, reachable inside the lab's namespaces only.
  Log in with a client certificate of the cluster CA (the administrator's, or one from gvs-master cert admin NAME):
    ip netns exec %[2]s curl --cacert %[3]s --cert %[4]s --key %[5]s %[1]s/matrix
  In a browser: import %[4]s and %[5]s (as a PKCS#12 file: openssl pkcs12 -export -in %[4]s -inkey %[5]s -out admin.p12)
  and trust %[3]s, then run the browser in a lab namespace: ip netns exec %[2]s chromium %[1]s
  (docs/console.md: how the browser test does it with an NSS database).`, url, c.Nodes[1].NS, a.CA, a.Cert, a.Key)
}
