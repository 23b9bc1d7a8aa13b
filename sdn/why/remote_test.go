package why_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/why"
)

// pipeListener is a net.Listener of socket pairs: the tests bind no
// address and send nothing through a network namespace.
type pipeListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error { l.once.Do(func() { close(l.done) }); return nil }

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// dial connects to the listener through a socket pair: buffered as TCP
// is (net.Pipe is not, and a TLS alert written while the peer writes too
// would block), bound to no address.
func (l *pipeListener) dial(ctx context.Context, _ netip.AddrPort) (net.Conn, error) {
	a, b, err := socketPair()
	if err != nil {
		return nil, err
	}
	select {
	case l.ch <- b:
		return a, nil
	case <-ctx.Done():
		a.Close()
		b.Close()
		return nil, ctx.Err()
	case <-l.done:
		a.Close()
		b.Close()
		return nil, net.ErrClosed
	}
}

func socketPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

// testPKI is a cluster CA and identities issued by it, in files.
type testPKI struct {
	t   *testing.T
	ca  *pki.CA
	dir string
}

func newTestPKI(t *testing.T) *testPKI {
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, ca: ca, dir: t.TempDir()}
}

func (p *testPKI) issue(name string, req pki.Request) pki.Files {
	p.t.Helper()
	cert, key, err := p.ca.Issue(req)
	if err != nil {
		p.t.Fatal(err)
	}
	f, err := pki.WriteBundle(p.dir, name, p.ca, cert, key)
	if err != nil {
		p.t.Fatal(err)
	}
	return f
}

// node issues node name's certificate as gvs-master cert node does.
func (p *testPKI) node(name string) pki.Files {
	return p.issue(name, pki.Request{CommonName: pki.NodeUser(name), Usage: pki.ClientAuth | pki.ServerAuth, DNSNames: []string{pki.NodeServerName(name)}})
}

func (p *testPKI) client(cn string, org ...string) *tls.Config {
	p.t.Helper()
	cfg, err := p.issue("client-"+strings.ReplaceAll(cn, ":", "-"), pki.Request{CommonName: cn, Usage: pki.ClientAuth, Organization: org}).ClientConfig()
	if err != nil {
		p.t.Fatal(err)
	}
	return cfg
}

// serveNode serves a trace endpoint for node with files f over in-memory
// pipes; handled counts the requests that reached the daemon's handler.
func serveNode(t *testing.T, f pki.Files, lc *labCluster, node string, handled *atomic.Int32) *pipeListener {
	t.Helper()
	cfg, err := why.ServerConfig(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := newPipeListener()
	ctx, cancel := context.WithCancel(context.Background())
	h := func(ctx context.Context, req control.Request) (any, error) {
		handled.Add(1)
		switch req.Command {
		case "trace":
			return lc.Trace(ctx, node, req.Args)
		case "pods":
			ps, _ := lc.Pods(ctx, node)
			type podView struct {
				Name    string     `json:"name"`
				Project string     `json:"project"`
				IP      netip.Addr `json:"ip"`
				MAC     string     `json:"mac"`
				Port    uint32     `json:"port"`
				VNID    uint32     `json:"vnid"`
			}
			var out []podView
			for _, p := range ps {
				out = append(out, podView{p.Name, p.Namespace, p.IP, p.MAC, p.Port, p.VNID})
			}
			return out, nil
		}
		return "changed something", nil
	}
	done := make(chan struct{})
	go func() { _ = control.Serve(ctx, why.NewListener(l, cfg), why.Handler(h), nil); close(done) }()
	t.Cleanup(func() { cancel(); l.Close(); <-done })
	return l
}

var nodeAddrs = map[string]netip.AddrPort{
	"a": netip.AddrPortFrom(netip.MustParseAddr("192.168.1.1"), why.DefaultPort),
	"b": netip.AddrPortFrom(netip.MustParseAddr("192.168.1.2"), why.DefaultPort),
}

// cluster serves a and b and returns a Remote that dials them.
func remoteCluster(t *testing.T, p *testPKI, lc *labCluster, handled *atomic.Int32) (ls map[string]*pipeListener, dial func(context.Context, netip.AddrPort) (net.Conn, error)) {
	ls = map[string]*pipeListener{}
	for _, n := range []string{"a", "b"} {
		ls[n] = serveNode(t, p.node(n), lc, n, handled)
	}
	return ls, func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
		for n, a := range nodeAddrs {
			if a == ap {
				return ls[n].dial(ctx, ap)
			}
		}
		return nil, errors.New("no route")
	}
}

func TestRemote(t *testing.T) {
	lc := newLabCluster(t, sdn.ModeMultitenant, nil)
	p := newTestPKI(t)
	var handled atomic.Int32
	_, dial := remoteCluster(t, p, lc, &handled)
	ctx := context.Background()

	for who, cfg := range map[string]*tls.Config{
		pki.AdminUser:  p.client(pki.AdminUser),
		pki.MasterUser: p.client(pki.MasterUser),
		"alice":        p.client("alice", pki.AdminOrganization), // gvs-master cert admin alice
	} {
		t.Run("allowed-"+who, func(t *testing.T) {
			r := &why.Remote{TLS: cfg, Nodes: nodeAddrs, Dial: dial}
			pods, err := why.ListPods(ctx, r, []string{"a", "b"})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods) != 5 {
				t.Fatalf("%d pods, want 5: %+v", len(pods), pods)
			}
			from, to := find(t, pods, "p1/client"), find(t, pods, "p2/server")
			a, err := why.Ask(ctx, r, why.Question{From: from, To: to, Target: why.Target{Proto: "tcp", Port: 8080}})
			if err != nil {
				t.Fatal(err)
			}
			if a.Allowed || a.Reason != "VNID 10 may not reach VNID 11 (table 80, node b)" {
				t.Errorf("answer over the endpoints: allowed=%v %q", a.Allowed, a.Reason)
			}
			// The same answer as the tables give directly.
			direct, err := why.Ask(ctx, lc, why.Question{From: from, To: to, Target: why.Target{Proto: "tcp", Port: 8080}})
			if err != nil || direct.Reason != a.Reason || len(direct.Steps) != len(a.Steps) {
				t.Errorf("remote and direct answers differ: %q (%d steps) vs %q (%d steps), %v", a.Reason, len(a.Steps), direct.Reason, len(direct.Steps), err)
			}
		})
	}

	refused := func(t *testing.T, r *why.Remote) {
		t.Helper()
		before := handled.Load()
		_, err := r.Trace(ctx, "b", "in_port=3,ip,nw_src=10.128.2.2,nw_dst=10.128.2.3")
		if err == nil {
			t.Fatal("trace allowed")
		}
		t.Logf("refused: %v", err)
		if !strings.Contains(err.Error(), "remote error: tls") {
			t.Errorf("not refused in the TLS handshake: %v", err)
		}
		if _, err := r.Pods(ctx, "a"); err == nil {
			t.Fatal("pods allowed")
		}
		if n := handled.Load() - before; n != 0 {
			t.Errorf("%d refused requests reached the daemon's handler", n)
		}
	}
	t.Run("refused-node-identity", func(t *testing.T) {
		cfg, err := p.node("c").ClientConfig() // a stolen node credential
		if err != nil {
			t.Fatal(err)
		}
		refused(t, &why.Remote{TLS: cfg, Nodes: nodeAddrs, Dial: dial})
	})
	t.Run("refused-node-with-admin-organization", func(t *testing.T) {
		refused(t, &why.Remote{TLS: p.client(pki.NodeUser("c"), pki.AdminOrganization), Nodes: nodeAddrs, Dial: dial})
	})
	t.Run("refused-tenant", func(t *testing.T) {
		refused(t, &why.Remote{TLS: p.client("bob"), Nodes: nodeAddrs, Dial: dial})
	})
	t.Run("refused-other-ca-admin", func(t *testing.T) {
		other := newTestPKI(t)
		cfg := other.client(pki.AdminUser)
		cfg.RootCAs = p.client(pki.AdminUser).RootCAs // trusts the right CA, presents another's
		refused(t, &why.Remote{TLS: cfg, Nodes: nodeAddrs, Dial: dial})
	})
	t.Run("refused-no-certificate", func(t *testing.T) {
		cfg := &tls.Config{RootCAs: p.client(pki.AdminUser).RootCAs}
		refused(t, &why.Remote{TLS: cfg, Nodes: nodeAddrs, Dial: dial})
	})
	t.Run("refused-write-commands", func(t *testing.T) {
		before := handled.Load()
		// Remote only sends trace and pods; a hand-made client asks for more.
		for _, cmd := range []string{"add-flows", "del-flows", "flush-conntrack", "capture", "show"} {
			err := rawCall(ctx, t, p.client(pki.AdminUser), dial, "b", control.Request{Command: cmd, Args: "table=0,actions=drop"})
			if err == nil || !strings.Contains(err.Error(), "not answered on the trace endpoint") {
				t.Errorf("%s: %v", cmd, err)
			}
		}
		if n := handled.Load() - before; n != 0 {
			t.Errorf("%d write requests reached the daemon's handler", n)
		}
	})
	t.Run("unknown-node", func(t *testing.T) {
		r := &why.Remote{TLS: p.client(pki.AdminUser), Nodes: nodeAddrs, Dial: dial}
		if _, err := r.Trace(ctx, "z", "ip"); !errors.Is(err, why.ErrUnknownNode) {
			t.Errorf("%v, want ErrUnknownNode", err)
		}
	})
}

// rawCall sends one request to node's endpoint as a client of its own
// and returns the endpoint's error.
func rawCall(ctx context.Context, t *testing.T, cfg *tls.Config, dial func(context.Context, netip.AddrPort) (net.Conn, error), node string, req control.Request) error {
	t.Helper()
	raw, err := dial(ctx, nodeAddrs[node])
	if err != nil {
		return err
	}
	defer raw.Close()
	c := cfg.Clone()
	c.ServerName = pki.NodeServerName(node)
	tc := tls.Client(raw, c)
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	if err := json.NewEncoder(tc).Encode(req); err != nil {
		return err
	}
	var resp control.Response
	if err := json.NewDecoder(tc).Decode(&resp); err != nil {
		return err
	}
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	return nil
}

// TestRemoteVerifiesServer: a client refuses an endpoint whose
// certificate is not the node's it asked for (another node's, or another
// CA's), and sends no certificate to it.
func TestRemoteVerifiesServer(t *testing.T) {
	p := newTestPKI(t)
	ctx := context.Background()
	admin := p.client(pki.AdminUser)
	for name, serverFiles := range map[string]pki.Files{
		"another-node": p.node("a"),             // b's address answered by a's certificate
		"another-ca":   newTestPKI(t).node("b"), // b's name, another CA
	} {
		t.Run(name, func(t *testing.T) {
			kp, err := tls.LoadX509KeyPair(serverFiles.Cert, serverFiles.Key)
			if err != nil {
				t.Fatal(err)
			}
			var sawCert atomic.Bool
			ended := make(chan struct{}, 1)
			srv := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{kp}, ClientAuth: tls.RequestClientCert,
				VerifyConnection: func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) > 0 {
						sawCert.Store(true)
					}
					return nil
				}}
			l := newPipeListener()
			defer l.Close()
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						_ = tls.Server(c, srv).HandshakeContext(ctx)
						ended <- struct{}{}
					}()
				}
			}()
			r := &why.Remote{TLS: admin, Nodes: nodeAddrs, Dial: l.dial, Timeout: 5 * time.Second}
			if _, err := r.Trace(ctx, "b", "ip"); err == nil {
				t.Fatal("the client accepted an endpoint that is not node b")
			} else {
				t.Logf("refused: %v", err)
			}
			<-ended // the server's side of the handshake is over
			if sawCert.Load() {
				t.Error("the client sent its certificate to an unverified server")
			}
		})
	}
}

func TestServerConfigNeedsServingCertificate(t *testing.T) {
	p := newTestPKI(t)
	f := p.issue("old-node", pki.Request{CommonName: pki.NodeUser("old"), Usage: pki.ClientAuth})
	if _, err := why.ServerConfig(f, nil); !errors.Is(err, why.ErrNotServing) {
		t.Errorf("a client-only node certificate: %v, want ErrNotServing", err)
	}
}

// TestNodeCertificateNamesOnlyItsEndpoint: a node certificate as
// gvs-master cert node issues it verifies for its trace endpoint's name
// and for no other server's (the node's name, localhost, an address).
func TestNodeCertificateNamesOnlyItsEndpoint(t *testing.T) {
	p := newTestPKI(t)
	c, err := pki.CertFile(p.node("b").Cert)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.VerifyHostname(pki.NodeServerName("b")); err != nil {
		t.Errorf("not valid for its endpoint: %v", err)
	}
	for _, name := range []string{"b", "localhost", "127.0.0.1", "192.168.1.2", pki.NodeServerName("a")} {
		if c.VerifyHostname(name) == nil {
			t.Errorf("node b's certificate is valid for %s", name)
		}
	}
}
