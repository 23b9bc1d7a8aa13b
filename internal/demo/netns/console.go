package netns

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/gvswitch/gvs/lab"
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
	if !kube {
		a := c.AdminTLS()
		out, err = c.Lab.Exec(ctx, from, append(curl, "--cert", a.Cert, "--key", a.Key, url+"/")...)
		code = strings.TrimSpace(string(out))
		r.printf("    with the administrator's certificate: HTTP %s\n", code)
		if err != nil || code != "200" {
			r.fail(fmt.Sprintf("the console refused the administrator's certificate: %q (%v)", code, err))
		}
	}
}

// consoleHelp says how to log in to the console.
func (r *run) consoleHelp(kube bool) string {
	c := r.c
	url := "https://" + consoleAddr().String()
	if kube {
		ca := filepath.Join(consoleDataDir(r.cfg), "pki", "ca.crt")
		return fmt.Sprintf(`Web console (read-only): %[1]s, reachable inside the lab's namespaces only.
  Log in with a bearer token of the API server (the login form, or a header), e.g. an administrator's:
    TOKEN=$(ip netns exec %[2]s kubectl --kubeconfig %[3]s -n default create token default)
  (a tenant's token sees only the projects whose pods it may list). From the command line:
    ip netns exec %[4]s curl --cacert %[5]s -H "Authorization: Bearer $TOKEN" %[1]s/pods
  In a browser: run it in a lab namespace, e.g. ip netns exec %[4]s chromium --user-data-dir=$(mktemp -d) %[1]s
  (trust %[5]s, the CA of the console's certificate).`, url, c.Nodes[0].NS, c.KubeAdmin, c.Nodes[1].NS, ca)
	}
	a := c.AdminTLS()
	return fmt.Sprintf(`Web console (read-only): %[1]s, reachable inside the lab's namespaces only.
  Log in with a client certificate of the cluster CA (the administrator's, or one from gvs-master cert admin NAME):
    ip netns exec %[2]s curl --cacert %[3]s --cert %[4]s --key %[5]s %[1]s/matrix
  In a browser: import %[4]s and %[5]s (as a PKCS#12 file: openssl pkcs12 -export -in %[4]s -inkey %[5]s -out admin.p12)
  and trust %[3]s, then run the browser in a lab namespace: ip netns exec %[2]s chromium %[1]s
  (docs/console.md: how the browser test does it with an NSS database).`, url, c.Nodes[1].NS, a.CA, a.Cert, a.Key)
}
