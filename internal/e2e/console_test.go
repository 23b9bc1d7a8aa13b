package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// consolePort is where the tests' gvs-master serves its console, on the
// first node's underlay address.
const consolePort = 9443

// consoleShots is where TestConsoleBrowser writes its screenshots when
// GVS_UPDATE_SCREENSHOTS=1 (`make console-screenshots`): the ones
// docs/console.md links. Otherwise they go to a temporary directory, so
// that a test run leaves the work tree as it was.
const consoleShots = "../../docs/console"

// shotsDir is where this run's screenshots go (consoleShots).
func shotsDir(t *testing.T) string {
	if os.Getenv("GVS_UPDATE_SCREENSHOTS") == "1" {
		return consoleShots
	}
	return t.TempDir()
}

// TestConsoleBrowser: gvs-master's console in a real browser (Debian's
// headless Chromium driven by chromedp) inside the lab: the browser runs
// in the second node's network namespace and reaches the console on the
// first node's underlay address, logging in with the administrator's
// client certificate (imported into the NSS database of a temporary HOME,
// selected by the AutoSelectCertificateForUrls policy). It opens the
// cluster map, the pods page (which must follow a label change without a
// reload), the reachability matrix and the "why" page of a pair blocked by
// VNID isolation (multitenant mode) and of one blocked by a NetworkPolicy
// (networkpolicy mode), checks what the pages show, and writes a
// screenshot of each (to docs/console/ with GVS_UPDATE_SCREENSHOTS=1).
func TestConsoleBrowser(t *testing.T) {
	t.Parallel() // its labs are its own (internal/e2e/doc.go)
	needRoot(t)
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Skip("needs Debian's chromium (make deps)")
	}
	t.Run("multitenant", func(t *testing.T) {
		c := upConsole(t, "cnb", "multitenant")
		n1, n2 := c.Nodes[0], c.Nodes[1]
		alpha1, alpha2, beta2 := n1.Pods[1], n2.Pods[1], n2.Pods[2]
		if alpha1.Project != "alpha" || beta2.Project != "beta" || alpha1.VNID == beta2.VNID {
			t.Fatalf("unexpected projects: %s (VNID %d), %s (VNID %d)", alpha1.Project, alpha1.VNID, beta2.Project, beta2.VNID)
		}
		b := startBrowser(t, c, n2.NS)

		b.open(t, "/", "#nodes")
		text := b.text(t, "#main")
		for _, want := range []string{n1.Name, n2.Name, n1.Subnet.String(), n2.Subnet.String(), "alpha", "beta", "multitenant"} {
			if !strings.Contains(text, want) {
				t.Errorf("map: no %q in\n%s", want, text)
			}
		}
		for _, n := range []string{n1.Name, n2.Name} {
			if got := b.text(t, fmt.Sprintf(`#nodes tr[data-node=%q] td:nth-child(4)`, n)); got != "up" {
				t.Errorf("map: node %s's tunnel is %q, want up", n, got)
			}
		}
		for _, p := range []cluster.Pod{alpha1, beta2} {
			if got := b.text(t, fmt.Sprintf(`#projects tr[data-project=%q] td.vnid`, p.Project)); got != fmt.Sprint(p.VNID) {
				t.Errorf("map: project %s's VNID is %q, want %d", p.Project, got, p.VNID)
			}
		}
		b.shot(t, "map")

		// The pods page follows a label set after it loaded.
		b.open(t, "/pods", "#pods")
		key := "alpha/" + alpha2.Name
		if !strings.Contains(b.text(t, "#pods"), key) {
			t.Errorf("pods: no %s", key)
		}
		if out, err := c.RegistryCtl(ctx(t), "label", "pod", key, "console=live"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		b.waitText(t, fmt.Sprintf(`#pods tr[data-pod=%q]`, key), "console=live", 30*time.Second)
		if !b.attr(t, "body", "data-updated") {
			t.Error("pods: the label showed without a live update (body has no data-updated)")
		}
		// Live traffic: pings from alpha n1 show in alpha n2's port
		// counters (received: what the switch wrote to the pod).
		row := fmt.Sprintf(`#pods tr[data-pod=%q] td:nth-child(7)`, key)
		before := b.text(t, row)
		if ok, out := ping(t, c.Lab, alpha1.NS, alpha2.IP, 56); !ok {
			t.Fatalf("alpha n1 cannot ping alpha n2:\n%s", out)
		}
		b.waitFor(t, row, func(s string) bool { return s != before && !strings.HasPrefix(s, "0 pkts") }, 30*time.Second)
		b.shot(t, "pods")

		b.open(t, "/matrix?target=tcp/8080", "#matrix")
		cell := func(from, to cluster.Pod) string {
			return b.attrValue(t, fmt.Sprintf(`#matrix td[data-from=%q][data-to=%q]`, from.Project+"/"+from.Name, to.Project+"/"+to.Name), "class")
		}
		if got := cell(alpha1, alpha2); got != "yes" {
			t.Errorf("matrix: alpha n1 → alpha n2 is %q, want yes", got)
		}
		if got := cell(alpha1, beta2); got != "no" {
			t.Errorf("matrix: alpha n1 → beta n2 is %q, want no", got)
		}
		b.shot(t, "matrix")
		b.open(t, "/matrix?target=udp/53&projects=alpha,beta", "#matrix")
		if m := b.text(t, "#matrix"); strings.Contains(m, "default/") || !strings.Contains(m, "alpha/"+alpha1.Name) {
			t.Errorf("matrix of projects alpha and beta: %q", m)
		}
		if got := cell(alpha2, beta2); got != "no" {
			t.Errorf("matrix udp/53: alpha n2 → beta n2 (same node) is %q, want no", got)
		}

		b.open(t, fmt.Sprintf("/why?from=alpha/%s&to=beta/%s&target=tcp/8080", alpha1.Name, beta2.Name), "#verdict")
		want := fmt.Sprintf("VNID %d may not reach VNID %d (table 80, node %s)", alpha1.VNID, beta2.VNID, n2.Name)
		if v, r := b.text(t, "#verdict"), b.text(t, "#reason"); v != "BLOCKED" || r != want {
			t.Errorf("why alpha → beta: %q %q, want BLOCKED %q", v, r, want)
		}
		if d := b.text(t, "#steps tr.decided"); !strings.Contains(d, n2.Name) || !strings.Contains(d, "80") {
			t.Errorf("why alpha → beta: the deciding step %q is not table 80 on %s", d, n2.Name)
		}
		if !strings.Contains(b.text(t, "#steps"), n1.Name) {
			t.Error("why alpha → beta: no step on the source node")
		}
		b.shot(t, "why-vnid")
	})

	t.Run("networkpolicy", func(t *testing.T) {
		c := upConsole(t, "cnp", "networkpolicy")
		n1, n2 := c.Nodes[0], c.Nodes[1]
		beta1, alpha2 := n1.Pods[2], n2.Pods[1]
		applyWebFromBeta(t, c)
		b := startBrowser(t, c, n2.NS)
		b.open(t, "/policies", "#policies")
		b.waitText(t, `#policies tr[data-policy="alpha/web-from-beta"] td.selects`, "alpha/"+alpha2.Name, 30*time.Second)
		b.shot(t, "policies")

		path := fmt.Sprintf("/why?from=beta/%s&to=alpha/%s&target=tcp/8080", beta1.Name, alpha2.Name)
		// The nodes apply the policy when they see it: ask until they have.
		var reason string
		for range 30 {
			b.open(t, path, "#verdict")
			if reason = b.text(t, "#reason"); b.text(t, "#verdict") == "BLOCKED" {
				break
			}
			time.Sleep(time.Second) // paces the reloads while the nodes take the policy in
		}
		// sdn/why's wording: "dropped by NetworkPolicy alpha/web-from-beta
		// in table 80 on node n2: ...".
		for _, want := range []string{"dropped by NetworkPolicy alpha/web-from-beta", "table 80", "node " + n2.Name} {
			if !strings.Contains(reason, want) {
				t.Errorf("why beta n1 → alpha n2 tcp/8080: %q, want %q (dropped by alpha's policy on %s)", reason, want, n2.Name)
			}
		}
		b.shot(t, "why-networkpolicy")

		b.open(t, strings.Replace(path, "tcp/8080", "tcp/80", 1), "#verdict")
		if v := b.text(t, "#verdict"); v != "REACHES" {
			t.Errorf("why beta n1 → alpha n2 tcp/80: %q (%s), want REACHES", v, b.text(t, "#reason"))
		}
	})
}

// upConsole brings up a two-node registry-mode cluster (projects default,
// alpha and beta on each node) whose gvs-master serves the console.
func upConsole(t *testing.T, short, mode string) *cluster.Cluster {
	t.Helper()
	c := up(t, short, cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}},
		Mode:         mode,
		ControlPlane: cluster.ControlPlaneEmbedded,
		CNI:          true,
		MasterArgs:   []string{"--console-addr", fmt.Sprintf("%s:%d", labNodeIP(t), consolePort)},
	})
	if err := c.RefreshVNIDs(ctx(t)); err != nil {
		t.Fatal(err)
	}
	return c
}

// labNodeIP is the first node's underlay address, known before the
// cluster is up: node i (1-based) is at the underlay's address plus
// lab.NodeHostOffset plus i.
func labNodeIP(t *testing.T) string {
	t.Helper()
	a := underlay.Addr()
	for range lab.NodeHostOffset + 1 {
		a = a.Next()
	}
	return a.String()
}

// consoleURL is the console of c's gvs-master.
func consoleURL(c *cluster.Cluster) string {
	return fmt.Sprintf("https://%s:%d", c.Nodes[0].IP, consolePort)
}

// browser is a headless Chromium in a lab namespace.
type browser struct {
	ctx  context.Context
	base string
}

// startBrowser prepares a HOME whose NSS database trusts the cluster CA
// and holds the administrator's certificate, and a policy that selects it
// for the console, then starts Chromium in namespace ns (in a mount
// namespace of its own, where the policy is bound over /etc/chromium),
// driven through chromedp's pipe.
func startBrowser(t *testing.T, c *cluster.Cluster, ns string) *browser {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	db := "sql:" + filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(filepath.Join(home, ".pki", "nssdb"), 0o700); err != nil {
		t.Fatal(err)
	}
	admin := c.AdminTLS()
	p12 := filepath.Join(dir, "admin.p12")
	for _, argv := range [][]string{
		{"certutil", "-N", "-d", db, "--empty-password"},
		{"certutil", "-A", "-d", db, "-n", "gvs-cluster-ca", "-t", "CT,C,C", "-i", admin.CA},
		{"openssl", "pkcs12", "-export", "-in", admin.Cert, "-inkey", admin.Key, "-out", p12, "-passout", "pass:gvs", "-name", "gvs-admin"},
		{"pk12util", "-i", p12, "-d", db, "-W", "gvs"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
	etc := filepath.Join(dir, "etc-chromium")
	if err := os.MkdirAll(filepath.Join(etc, "policies", "managed"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := consoleURL(c)
	pattern, _ := json.Marshal(map[string]any{"pattern": base, "filter": map[string]any{}})
	pol, _ := json.Marshal(map[string]any{"AutoSelectCertificateForUrls": []string{string(pattern)}})
	if err := os.WriteFile(filepath.Join(etc, "policies", "managed", "gvs-console.json"), pol, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath("chromium"),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.WindowSize(1200, 760),
		chromedp.Env("HOME="+home),
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			// ip netns exec NS unshare -m sh -c 'mount --bind ETC
			// /etc/chromium && exec chromium ARGS...': the browser, its
			// network and its policy stay in the lab.
			script := `mount --bind "$0" /etc/chromium && exec chromium "$@"`
			cmd.Args = append([]string{"ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private",
				"sh", "-c", script, etc}, cmd.Args[1:]...)
			cmd.Path, _ = exec.LookPath("ip")
		}),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium in %s: %v", ns, err)
	}
	return &browser{ctx: bctx, base: base}
}

// open loads path and waits for selector to be visible.
func (b *browser) open(t *testing.T, path, selector string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS(selector))); err != nil {
		body, _ := b.try(chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("open %s (waiting for %s): %v\npage: %s", path, selector, err, body)
	}
}

// try runs a on the page, for at most 10 seconds.
func (b *browser) try(a chromedp.Action[string]) (string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, a)
}

func (b *browser) text(t *testing.T, selector string) string {
	t.Helper()
	s, err := b.try(chromedp.Text(chromedp.CSS(selector)))
	if err != nil {
		t.Fatalf("text of %s: %v", selector, err)
	}
	return strings.TrimSpace(s)
}

func (b *browser) attribute(t *testing.T, selector, name string) chromedp.AttributeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	r, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(selector), name))
	if err != nil {
		t.Fatalf("attribute %s of %s: %v", name, selector, err)
	}
	return r
}

func (b *browser) attrValue(t *testing.T, selector, name string) string {
	t.Helper()
	return b.attribute(t, selector, name).Value
}

func (b *browser) attr(t *testing.T, selector, name string) bool {
	t.Helper()
	return b.attribute(t, selector, name).Exists
}

// waitText waits, without reloading, until selector's text contains want.
func (b *browser) waitText(t *testing.T, selector, want string, d time.Duration) {
	t.Helper()
	b.waitFor(t, selector, func(s string) bool { return strings.Contains(s, want) }, d)
}

// waitFor waits, without reloading, until selector's text satisfies ok.
func (b *browser) waitFor(t *testing.T, selector string, ok func(string) bool, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var s string
	for time.Now().Before(deadline) {
		s, _ = b.try(chromedp.Text(chromedp.CSS(selector)))
		if s = strings.TrimSpace(s); ok(s) {
			return
		}
		time.Sleep(300 * time.Millisecond) // paces the reads of a page the event stream updates
	}
	t.Fatalf("%s never showed what the test waits for (last: %q)", selector, s)
}

// shot writes a screenshot of the window to NAME.png in shotsDir and
// checks that it is a PNG image.
func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 1024 {
		t.Fatalf("screenshot %s: %d bytes, not a PNG image of the page", name, len(png))
	}
	dir := shotsDir(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
