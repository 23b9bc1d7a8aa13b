package console

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/why"
)

// staticSource is a Source with a fixed view of two tenants' projects.
type staticSource struct{ v View }

func (s staticSource) Load(context.Context) (View, error) { return s.v, nil }

func testView() View {
	pods := []Pod{
		{Namespace: "p1", Name: "client", Node: "a", IP: netip.MustParseAddr("10.128.0.2"), VNID: 10, Labels: map[string]string{"app": "client"}},
		{Namespace: "p1", Name: "server", Node: "b", IP: netip.MustParseAddr("10.128.2.2"), VNID: 10, Labels: map[string]string{"app": "server"},
			Traffic: &Traffic{RxPackets: 3, RxBytes: 300}},
		{Namespace: "p2", Name: "secret-db", Node: "b", IP: netip.MustParseAddr("10.128.2.3"), VNID: 11, Labels: map[string]string{"app": "db"}},
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "p1", Name: "only-client"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}}}}
	np2 := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "p2", Name: "db-lockdown"}}
	return View{Mode: "multitenant", Read: time.Now(),
		Nodes: []Node{{Name: "a", IP: netip.MustParseAddr("192.168.1.1"), Subnet: netip.MustParsePrefix("10.128.0.0/23"), Tunnel: "up"},
			{Name: "b", IP: netip.MustParseAddr("192.168.1.2"), Subnet: netip.MustParsePrefix("10.128.2.0/23"), Tunnel: "up"}},
		Projects: []Project{{Name: "default", Global: true}, {Name: "p1", VNID: 10}, {Name: "p2", VNID: 11, Firewall: []string{"Deny to 0.0.0.0/0"}}},
		Pods:     pods,
		Policies: []Policy{policyOf(np, pods), policyOf(np2, pods)},
	}
}

// testPKI is a CA and issues the console's serving certificate and the
// client certificates of an administrator, a node, a tenant and an
// administrator of another CA.
type testPKI struct {
	ca     *x509.CertPool
	server tls.Certificate
	certs  map[string]tls.Certificate
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	issue := func(req pki.Request) tls.Certificate {
		c, k, err := ca.Issue(req)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	p := testPKI{ca: pool, certs: map[string]tls.Certificate{}}
	p.server = issue(pki.Request{CommonName: "console", Usage: pki.ServerAuth, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	p.certs["admin"] = issue(pki.Request{CommonName: pki.AdminUser, Usage: pki.ClientAuth, Organization: []string{pki.AdminOrganization}})
	p.certs["node"] = issue(pki.Request{CommonName: pki.NodeUser("a"), Usage: pki.ClientAuth | pki.ServerAuth, DNSNames: []string{"a"}})
	p.certs["tenant"] = issue(pki.Request{CommonName: "alice", Usage: pki.ClientAuth})
	other, err := pki.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, k, err := other.Issue(pki.Request{CommonName: pki.AdminUser, Usage: pki.ClientAuth, Organization: []string{pki.AdminOrganization}})
	if err != nil {
		t.Fatal(err)
	}
	if p.certs["foreign-admin"], err = tls.X509KeyPair(c, k); err != nil {
		t.Fatal(err)
	}
	return p
}

func startTLS(t *testing.T, s *Server, p testPKI, clientCAs bool) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(s)
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}}
	if clientCAs {
		ts.TLS.ClientAuth, ts.TLS.ClientCAs = tls.VerifyClientCertIfGiven, p.ca
	}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts
}

func client(p testPKI, cert string) *http.Client {
	cfg := &tls.Config{RootCAs: p.ca}
	if cert != "" {
		c := p.certs[cert]
		// Sent whatever CAs the server names.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestCertAuth: without a certificate every page is refused and shows
// nothing of the cluster; a node's certificate and a tenant's are
// refused; a certificate of another CA ends the handshake; the
// administrator's certificate sees everything.
func TestCertAuth(t *testing.T) {
	p := newTestPKI(t)
	s, err := New(Config{Source: staticSource{testView()}, Auth: CertAuth{}})
	if err != nil {
		t.Fatal(err)
	}
	ts := startTLS(t, s, p, true)
	for _, path := range []string{"/", "/pods", "/policies", "/matrix", "/why", "/events?page=map"} {
		code, body, err := get(t, client(p, ""), ts.URL+path)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusUnauthorized || strings.Contains(body, "p1") || strings.Contains(body, "10.128") {
			t.Errorf("GET %s without credentials: %d %q, want 401 and nothing of the cluster", path, code, body)
		}
	}
	for _, who := range []string{"node", "tenant"} {
		code, body, err := get(t, client(p, who), ts.URL+"/")
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusForbidden || strings.Contains(body, "p1") {
			t.Errorf("GET / with the %s certificate: %d %q, want 403", who, code, body)
		}
	}
	if code, body, err := get(t, client(p, "foreign-admin"), ts.URL+"/"); err == nil {
		t.Errorf("a certificate of another CA passed the handshake: %d %q", code, body)
	}
	code, body, err := get(t, client(p, "admin"), ts.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`data-node="a"`, "10.128.2.0/23", `data-project="p2"`, "Deny to 0.0.0.0/0", "global"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("admin GET /: %d, no %q in\n%s", code, want, body)
		}
	}
	_, body, _ = get(t, client(p, "admin"), ts.URL+"/policies")
	if !strings.Contains(body, "app=server") || !strings.Contains(body, "<div>p1/server</div>") {
		t.Errorf("policies page: want the selector and the selected pod:\n%s", body)
	}
	_, body, _ = get(t, client(p, "admin"), ts.URL+"/matrix")
	if !strings.Contains(body, `id="missing"`) {
		t.Errorf("matrix without a Tracer: want the reason it is missing:\n%s", body)
	}
}

// TestEvents: the event stream sends the page's <main> and sends it again
// when the cluster changes, without a reload.
func TestEvents(t *testing.T) {
	p := newTestPKI(t)
	src := &changingSource{v: testView()}
	s, err := New(Config{Source: src, Auth: CertAuth{}, Refresh: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ts := startTLS(t, s, p, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/events?page=pods", nil)
	resp, err := client(p, "admin").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var seen strings.Builder
	buf := make([]byte, 4096)
	changed := false
	for !strings.Contains(seen.String(), "p1/newcomer") {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatalf("stream ended before the change arrived: %v\n%s", err, seen.String())
		}
		seen.Write(buf[:n])
		if !changed && strings.Contains(seen.String(), "event: main") {
			src.add(Pod{Namespace: "p1", Name: "newcomer", Node: "a", IP: netip.MustParseAddr("10.128.0.9"), VNID: 10})
			changed = true
		}
	}
}

type changingSource struct {
	mu chan struct{}
	v  View
}

func (c *changingSource) lock() {
	if c.mu == nil {
		c.mu = make(chan struct{}, 1)
	}
	c.mu <- struct{}{}
}

func (c *changingSource) Load(context.Context) (View, error) {
	c.lock()
	defer func() { <-c.mu }()
	v := c.v
	v.Pods = append([]Pod(nil), c.v.Pods...)
	return v, nil
}

func (c *changingSource) add(p Pod) {
	c.lock()
	defer func() { <-c.mu }()
	c.v.Pods = append(c.v.Pods, p)
}

// fakeAPI answers TokenReviews (token → user) and SubjectAccessReviews
// (user → namespaces whose pods it may list; "*" for all).
func fakeAPI(users map[string]string, access map[string][]string) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		if u, ok := users[tr.Spec.Token]; ok {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: u}}
		}
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		ra := sar.Spec.ResourceAttributes
		for _, ns := range access[sar.Spec.User] {
			if ra.Verb == "list" && ra.Resource == "pods" && (ns == "*" || (ra.Namespace == ns && ns != "")) {
				sar.Status.Allowed = true
			}
		}
		return true, sar, nil
	})
	return c
}

// TestTokenAuth: a tenant's token sees its own project and nothing of
// the others' (projects, pods, policies, the nodes); an administrator's
// token sees everything; an unknown token and no token are refused; the
// login form sets the cookie only for a token the API server knows.
func TestTokenAuth(t *testing.T) {
	p := newTestPKI(t)
	api := fakeAPI(map[string]string{"alice-token": "alice", "admin-token": "admin"},
		map[string][]string{"alice": {"p1"}, "admin": {"*"}})
	auth := &TokenAuth{Client: api, Projects: func(context.Context) ([]string, error) { return []string{"default", "p1", "p2"}, nil }}
	s, err := New(Config{Source: staticSource{testView()}, Auth: auth, Login: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := startTLS(t, s, p, false)
	c := client(p, "")
	for _, tc := range []struct{ name, token string }{{"none", ""}, {"unknown", "Bearer nobody"}} {
		var hdr []string
		if tc.token != "" {
			hdr = []string{"Authorization", tc.token}
		}
		code, body, err := get(t, c, ts.URL+"/pods", hdr...)
		if err != nil {
			t.Fatal(err)
		}
		if (code != http.StatusUnauthorized && code != http.StatusForbidden) || strings.Contains(body, "p1/") || strings.Contains(body, "10.128") {
			t.Errorf("%s token: %d, want a refusal with the login form only:\n%s", tc.name, code, body)
		}
	}
	for _, path := range []string{"/", "/pods", "/policies", "/events?page=pods"} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer alice-token")
		resp, err := c.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body) // the event stream ends with ctx
		resp.Body.Close()
		cancel()
		body := string(b)
		if resp.StatusCode != 200 {
			t.Errorf("alice GET %s: %d", path, resp.StatusCode)
		}
		for _, hidden := range []string{"p2", "secret-db", "db-lockdown", "10.128.2.3", `data-node=`, "192.168.1.", `data-project="default"`} {
			if strings.Contains(body, hidden) {
				t.Errorf("alice GET %s shows %q of another project or the nodes:\n%s", path, hidden, body)
			}
		}
		if path == "/pods" && !strings.Contains(body, "p1/server") {
			t.Errorf("alice GET /pods: her own pod is missing:\n%s", body)
		}
	}
	code, body, _ := get(t, c, ts.URL+"/", "Authorization", "Bearer admin-token")
	if code != 200 || !strings.Contains(body, `data-project="p2"`) || !strings.Contains(body, `data-node="b"`) {
		t.Errorf("admin token: %d, want the whole cluster:\n%s", code, body)
	}
	// The login form: a refused token sets no cookie; a good one does.
	resp, err := c.PostForm(ts.URL+"/login", map[string][]string{"token": {"nobody"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("login with an unknown token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp, err = c.PostForm(ts.URL+"/login", map[string][]string{"token": {"alice-token"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || !resp.Cookies()[0].HttpOnly || !resp.Cookies()[0].Secure {
		t.Fatalf("login with alice's token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	code, body, _ = get(t, c, ts.URL+"/pods", "Cookie", TokenCookie+"="+resp.Cookies()[0].Value)
	if code != 200 || !strings.Contains(body, "p1/client") || strings.Contains(body, "secret-db") {
		t.Errorf("alice by cookie: %d\n%s", code, body)
	}
}

// failTracer fails the test if the console traces or lists pods for a
// viewer who may not.
type failTracer struct{ t *testing.T }

func (f failTracer) Trace(context.Context, string, string) (control.TraceResult, error) {
	f.t.Error("traced for a tenant")
	return control.TraceResult{}, errors.New("no")
}

func (f failTracer) Pods(context.Context, string) ([]why.Pod, error) {
	f.t.Error("listed the nodes' pods for a tenant")
	return nil, errors.New("no")
}

// TestTracesForClusterViewersOnly: a trace shows the rules of every
// project it crosses, so a tenant's token gets the matrix and "why" pages
// without any trace run, even when the console has a Tracer.
func TestTracesForClusterViewersOnly(t *testing.T) {
	p := newTestPKI(t)
	api := fakeAPI(map[string]string{"alice-token": "alice"}, map[string][]string{"alice": {"p1"}})
	auth := &TokenAuth{Client: api, Projects: func(context.Context) ([]string, error) { return []string{"p1", "p2"}, nil }}
	ft := failTracer{t}
	s, err := New(Config{Source: staticSource{testView()}, Auth: auth, Login: true, Tracer: ft, Pods: ft})
	if err != nil {
		t.Fatal(err)
	}
	ts := startTLS(t, s, p, false)
	for _, path := range []string{"/matrix", "/why?from=p1/client&to=p2/secret-db&target=tcp/80"} {
		code, body, err := get(t, client(p, ""), ts.URL+path, "Authorization", "Bearer alice-token")
		if err != nil {
			t.Fatal(err)
		}
		if code != 200 || !strings.Contains(body, "only a viewer of the whole cluster") || strings.Contains(body, "secret-db") {
			t.Errorf("alice GET %s: %d, want the page without traces:\n%s", path, code, body)
		}
	}
}
