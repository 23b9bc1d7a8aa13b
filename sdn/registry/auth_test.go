package registry_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gvswitch/gvs/internal/etcdtest"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
)

// rawClient dials endpoint with a hand-made TLS configuration (no
// validation of ours in the way), for the refusal tests.
func rawClient(t *testing.T, endpoint string, tc *tls.Config) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tc, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func tlsWith(t *testing.T, e *etcdtest.Etcd, cert *tls.Certificate) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(e.CA.Cert)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return tc
}

func keyPair(t *testing.T, certPEM, keyPEM []byte) *tls.Certificate {
	t.Helper()
	kp, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &kp
}

// expectRefused runs a read and a write with c and wants both refused.
func expectRefused(t *testing.T, what string, c *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, registry.ConfigKey); err == nil {
		t.Errorf("%s: reading the registry was allowed", what)
	}
	if _, err := c.Put(ctx, registry.ProjectKey("beta"), `{"vnid":0}`); err == nil {
		t.Errorf("%s: writing a project was allowed", what)
	}
}

// Who may read and write what, against the embedded etcd and Debian's
// etcd-server: strangers (no certificate, another CA's, an expired one,
// our CA's with an unknown name) get nothing; a node reads, writes its
// own node record and project requests, and nothing else; the admin and
// the master change projects.
func TestPermissions(t *testing.T) {
	for _, kind := range []etcdtest.Kind{etcdtest.Embedded, etcdtest.External} {
		t.Run(kind.String(), func(t *testing.T) {
			e := etcdtest.Start(t, etcdtest.Options{Kind: kind})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			m := e.Dial(t, pki.MasterUser)
			if err := m.PutConfig(ctx, testConfig); err != nil {
				t.Fatal(err)
			}
			if err := m.EnsureProjects(ctx, nil, "default", "alpha"); err != nil {
				t.Fatal(err)
			}
			e.AuthorizeNode(t, "n1")
			e.AuthorizeNode(t, "n2")

			t.Run("strangers", func(t *testing.T) {
				expectRefused(t, "no certificate", rawClient(t, e.ClientURL, tlsWith(t, e, nil)))
				other, err := pki.NewCA("another CA", 0)
				if err != nil {
					t.Fatal(err)
				}
				c, k, err := other.Issue(pki.Request{CommonName: pki.MasterUser, Usage: pki.ClientAuth})
				if err != nil {
					t.Fatal(err)
				}
				expectRefused(t, "another CA's certificate", rawClient(t, e.ClientURL, tlsWith(t, e, keyPair(t, c, k))))
				c, k, err = e.CA.Issue(pki.Request{CommonName: pki.MasterUser, Usage: pki.ClientAuth,
					NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
				expectRefused(t, "an expired certificate", rawClient(t, e.ClientURL, tlsWith(t, e, keyPair(t, c, k))))
				c, k, err = e.CA.Issue(pki.Request{CommonName: "mallory", Usage: pki.ClientAuth})
				if err != nil {
					t.Fatal(err)
				}
				expectRefused(t, "our CA, unknown user", rawClient(t, e.ClientURL, tlsWith(t, e, keyPair(t, c, k))))
				// A server certificate's name is no user either.
				srv := e.PKI.Files("etcd-server")
				kp, err := tls.LoadX509KeyPair(srv.Cert, srv.Key)
				if err != nil {
					t.Fatal(err)
				}
				expectRefused(t, "the server's certificate", rawClient(t, e.ClientURL, tlsWith(t, e, &kp)))
				// Plain text against the TLS endpoint.
				insecure := registry.DialConfig{Endpoints: []string{"unix://" + e.ClientURL[len("unixs://"):]}, Insecure: true}
				if c, err := registry.Dial(insecure); err == nil {
					t.Cleanup(func() { c.Close() })
					expectRefused(t, "plain text", c)
				}
			})

			t.Run("node", func(t *testing.T) {
				n1 := e.Dial(t, pki.NodeUser("n1"))
				c := n1.Client()
				if _, err := n1.GetConfig(ctx); err != nil {
					t.Errorf("a node cannot read the configuration: %v", err)
				}
				if _, err := n1.Projects(ctx); err != nil {
					t.Errorf("a node cannot read the projects: %v", err)
				}
				l, err := c.Grant(ctx, 30)
				if err != nil {
					t.Fatalf("a node cannot take a lease: %v", err)
				}
				if err := n1.Register(ctx, registry.Node{Name: "n1", IP: netip.MustParseAddr("192.168.0.1")}, l.ID); err != nil {
					t.Errorf("a node cannot register itself: %v", err)
				}
				if err := n1.RequestProject(ctx, "n1", "gamma"); err != nil {
					t.Errorf("a node cannot request a project: %v", err)
				}
				if err := n1.PublishPods(ctx, "n1", l.ID, map[string]netip.Addr{"alpha/a": netip.MustParseAddr("10.128.0.5")}); err != nil {
					t.Errorf("a node cannot publish its pods' addresses: %v", err)
				}
				ka, err := c.KeepAliveOnce(ctx, l.ID)
				if err != nil || ka.TTL <= 0 {
					t.Errorf("a node cannot renew its lease: %v", err)
				}
				refused := map[string]func() error{
					"another node's record": func() error {
						return n1.Register(ctx, registry.Node{Name: "n2", IP: netip.MustParseAddr("192.168.0.9")}, l.ID)
					},
					"a request as another node": func() error { return n1.RequestProject(ctx, "n2", "delta") },
					"its own subnet record": func() error {
						_, err := c.Put(ctx, registry.SubnetKey("n1"), `{"node":"n1","ip":"192.168.0.1","subnet":"10.128.0.0/23"}`)
						return err
					},
					"a subnet claim": func() error { _, err := c.Put(ctx, registry.ClaimsPrefix+"10.128.2.0_23", "n1"); return err },
					"a project's VNID": func() error {
						_, err := c.Put(ctx, registry.ProjectKey("alpha"), `{"vnid":0}`)
						return err
					},
					"a project through the registry API": func() error {
						_, err := n1.UpdateProjects(ctx, nil, func(v *master.VNIDs) error { return v.MakeGlobal("alpha") })
						return err
					},
					"the configuration": func() error { return n1.PutConfig(ctx, testConfig) },
					"another node's pod addresses": func() error {
						return n1.PublishPods(ctx, "n2", 0, map[string]netip.Addr{"alpha/a": netip.MustParseAddr("10.128.2.5")})
					},
					"a NetworkPolicy": func() error {
						_, err := c.Put(ctx, registry.PolicyKey("alpha", "allow-all"), `{}`)
						return err
					},
					"deleting a NetworkPolicy": func() error {
						_, err := n1.DeletePolicy(ctx, "alpha", "deny")
						return err
					},
					"a namespace's labels": func() error {
						return n1.SetNamespaceLabels(ctx, "alpha", map[string]string{"team": "x"})
					},
					"a pod's labels": func() error {
						return n1.SetPodLabels(ctx, "alpha", "a", registry.PodLabels{Labels: map[string]string{"role": "db"}})
					},
					"the VNID cursor": func() error { _, err := c.Put(ctx, registry.VNIDCursor, "10"); return err },
					"an egress IP for itself": func() error {
						return n1.SetNodeEgressIPs(ctx, "n1", []netip.Addr{netip.MustParseAddr("192.168.0.50")})
					},
					"a project's egress IPs": func() error {
						return n1.SetProjectEgressIPs(ctx, "alpha", []netip.Addr{netip.MustParseAddr("192.168.0.50")})
					},
					"deleting the configuration": func() error {
						_, err := c.Delete(ctx, registry.ConfigKey)
						return err
					},
					"a user": func() error {
						_, err := c.UserAddWithOptions(ctx, "x", "", &clientv3.UserAddOptions{NoPassword: true})
						return err
					},
					"turning authentication off": func() error { _, err := c.AuthDisable(ctx); return err },
					"writing outside /gvs/":      func() error { _, err := c.Put(ctx, "/other", "x"); return err },
				}
				for what, op := range refused {
					err := op()
					if err == nil {
						t.Errorf("node n1 could write %s", what)
					} else if !registry.IsRefused(err) {
						t.Errorf("node n1 writing %s: %v, want a permission error", what, err)
					}
				}
				got, err := m.Projects(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got["alpha"] == 0 {
					t.Errorf("alpha's VNID became 0")
				}
			})

			t.Run("admin", func(t *testing.T) {
				a := e.Dial(t, pki.AdminUser)
				got, err := a.UpdateProjects(ctx, nil, func(v *master.VNIDs) error { _, err := v.Create("beta"); return err })
				if err != nil {
					t.Fatalf("the admin cannot create a project: %v", err)
				}
				if got["beta"] < master.MinVNID {
					t.Errorf("beta got VNID %d", got["beta"])
				}
				if _, err := a.Client().UserAddWithOptions(ctx, "x", "", &clientv3.UserAddOptions{NoPassword: true}); err == nil {
					t.Errorf("the admin could add an etcd user")
				}
				if err := a.SetNamespaceLabels(ctx, "alpha", map[string]string{"team": "x"}); err != nil {
					t.Errorf("the admin cannot label a namespace: %v", err)
				}
				if err := a.SetPodLabels(ctx, "alpha", "a", registry.PodLabels{Labels: map[string]string{"role": "db"}}); err != nil {
					t.Errorf("the admin cannot label a pod: %v", err)
				}
			})

			t.Run("revoked node", func(t *testing.T) {
				// n2 is up: its node record and a pod's address on its lease.
				before := e.Dial(t, pki.NodeUser("n2"))
				l, err := before.Client().Grant(ctx, 60)
				if err != nil {
					t.Fatal(err)
				}
				if err := before.Register(ctx, registry.Node{Name: "n2", IP: netip.MustParseAddr("192.168.0.2")}, l.ID); err != nil {
					t.Fatal(err)
				}
				if _, err := before.Client().Put(ctx, registry.PodKey("n2", "alpha", "a"), `{"ip":"10.128.2.5"}`, clientv3.WithLease(l.ID)); err != nil {
					t.Fatal(err)
				}
				if err := m.RevokeNode(ctx, "n2"); err != nil {
					t.Fatal(err)
				}
				n2 := e.Dial(t, pki.NodeUser("n2"))
				if _, err := n2.GetConfig(ctx); err == nil || !registry.IsRefused(err) {
					t.Errorf("a revoked node reads the registry: %v", err)
				}
				// Its records went with its lease, which neither its old
				// connection nor a new one can renew.
				for _, k := range []string{registry.NodeKey("n2"), registry.PodKey("n2", "alpha", "a")} {
					if resp, err := m.Client().Get(ctx, k); err != nil || len(resp.Kvs) != 0 {
						t.Errorf("%s after revocation: %v, %v", k, resp, err)
					}
				}
				for _, c := range []*registry.Registry{before, n2} {
					if ka, err := c.Client().KeepAliveOnce(ctx, l.ID); err == nil {
						t.Errorf("a revoked node renewed its lease: TTL %d", ka.TTL)
					}
				}
				if err := m.RevokeNode(ctx, "n2"); err != nil {
					t.Errorf("revoking again: %v", err)
				}
			})
		})
	}
}

// The dial configuration refuses plain text unless insecure is asked
// for, and TLS without certificates.
func TestDialConfigRefusesPlainText(t *testing.T) {
	dir := t.TempDir()
	d := pki.Dir(filepath.Join(dir, "pki"))
	ca, _, err := d.EnsureCA("t")
	if err != nil {
		t.Fatal(err)
	}
	c, k, err := ca.Issue(pki.Request{CommonName: "admin", Usage: pki.ClientAuth})
	if err != nil {
		t.Fatal(err)
	}
	files, err := d.Write("admin", c, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  registry.DialConfig
		want error
	}{
		{registry.DialConfig{Endpoints: []string{"http://10.0.0.1:2379"}}, registry.ErrInsecure},
		{registry.DialConfig{Endpoints: []string{"unix:///run/x"}}, registry.ErrInsecure},
		{registry.DialConfig{Endpoints: []string{"https://10.0.0.1:2379"}}, registry.ErrInsecure},
		{registry.DialConfig{Endpoints: []string{"https://10.0.0.1:2379", "http://10.0.0.2:2379"}, TLS: files, Insecure: true}, nil},
		{registry.DialConfig{Endpoints: []string{"10.0.0.1:2379"}, TLS: files}, nil},
		{registry.DialConfig{Endpoints: []string{"https://10.0.0.1:2379"}, TLS: pki.Files{CA: files.CA, Cert: files.Cert, Key: files.CA}}, nil},
	} {
		err := tc.cfg.Validate()
		if err == nil {
			t.Errorf("%+v: accepted", tc.cfg)
		} else if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.cfg, err, tc.want)
		}
	}
	ok := registry.DialConfig{Endpoints: []string{"https://10.0.0.1:2379"}, TLS: files}
	if err := ok.Validate(); err != nil {
		t.Errorf("TLS with certificates refused: %v", err)
	}
	ins := registry.DialConfig{Endpoints: []string{"http://10.0.0.1:2379"}, Insecure: true}
	if err := ins.Validate(); err != nil {
		t.Errorf("explicitly insecure refused: %v", err)
	}
	// The key file must stay private.
	st, err := os.Stat(files.Key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", st.Mode().Perm())
	}
}

// The explicitly insecure lab mode: plain text, no authentication; a
// client that did not ask for it is refused before it connects.
func TestInsecureLabMode(t *testing.T) {
	e := etcdtest.Start(t, etcdtest.Options{Insecure: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reg := e.Dial(t, pki.MasterUser)
	if err := reg.PutConfig(ctx, testConfig); err != nil {
		t.Fatalf("insecure mode: %v", err)
	}
	dc := e.DialConfig(pki.MasterUser)
	dc.Insecure = false
	if c, err := registry.Dial(dc); !errors.Is(err, registry.ErrInsecure) {
		if c != nil {
			c.Close()
		}
		t.Errorf("plain text without Insecure: %v, want ErrInsecure", err)
	}
}
