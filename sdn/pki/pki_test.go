package pki_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gvswitch/gvs/sdn/pki"
)

func TestEnsureCAAndIssue(t *testing.T) {
	d := pki.Dir(filepath.Join(t.TempDir(), "pki"))
	ca, created, err := d.EnsureCA("gvs cluster CA")
	if err != nil || !created {
		t.Fatalf("EnsureCA: %v %v", created, err)
	}
	again, created, err := d.EnsureCA("other")
	if err != nil || created || !again.Cert.Equal(ca.Cert) || !again.CanSign() {
		t.Fatalf("second EnsureCA replaced or lost the CA: %v %v", created, err)
	}
	for _, f := range []string{pki.CAKeyFile} {
		st, err := os.Stat(filepath.Join(string(d), f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, st.Mode(), err)
		}
	}
	req := pki.Request{CommonName: "etcd-server", Usage: pki.ServerAuth | pki.ClientAuth,
		DNSNames: []string{"localhost"}, IPs: []netip.Addr{netip.MustParseAddr("192.168.240.11")}}
	f, issued, err := d.Ensure(ca, "etcd-server", req, 0)
	if err != nil || !issued {
		t.Fatalf("Ensure: %v %v", issued, err)
	}
	if st, err := os.Stat(f.Key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key %s: mode %v %v, want 0600", f.Key, st.Mode(), err)
	}
	if _, issued, err := d.Ensure(ca, "etcd-server", req, 0); err != nil || issued {
		t.Errorf("Ensure re-issued a current certificate: %v %v", issued, err)
	}
	req.IPs = append(req.IPs, netip.MustParseAddr("10.0.0.1"))
	if _, issued, err := d.Ensure(ca, "etcd-server", req, 0); err != nil || !issued {
		t.Errorf("Ensure kept a certificate without the new address: %v %v", issued, err)
	}
	cert, err := pki.CertFile(f.Cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, host := range []string{"localhost", "192.168.240.11", "10.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "10.0.0.2"}); err == nil {
		t.Errorf("server certificate verifies for an address it was not issued for")
	}
	// A CA without its key loads but cannot sign.
	if err := os.Remove(filepath.Join(string(d), pki.CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	ro, err := d.LoadCA()
	if err != nil || ro.CanSign() {
		t.Fatalf("CA without key: %v, can sign %v", err, ro != nil && ro.CanSign())
	}
	if _, _, err := ro.Issue(pki.Request{CommonName: "x", Usage: pki.ClientAuth}); !errors.Is(err, pki.ErrNoCAKey) {
		t.Errorf("issue without the CA key: %v", err)
	}
}

func TestIssueRefusesBadRequests(t *testing.T) {
	ca, err := pki.NewCA("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []pki.Request{
		{Usage: pki.ClientAuth},
		{CommonName: "x"},
		{CommonName: "x", Usage: pki.ServerAuth},
		{CommonName: "x", Usage: pki.ClientAuth, NotBefore: time.Now(), NotAfter: time.Now().Add(-time.Hour)},
	} {
		if _, _, err := ca.Issue(r); !errors.Is(err, pki.ErrBadRequest) {
			t.Errorf("%+v: %v, want ErrBadRequest", r, err)
		}
	}
	other, _ := pki.NewCA("other", 0)
	okey, _ := other.KeyPEM()
	if _, err := pki.ParseCA(ca.CertPEM, okey); err == nil {
		t.Error("a CA certificate with another CA's key was accepted")
	}
}

// A client configuration picks up a replaced certificate at its next
// handshake, and keeps the last good pair while a file is half-replaced.
func TestClientConfigReloads(t *testing.T) {
	dir := t.TempDir()
	d := pki.Dir(dir)
	ca, _, err := d.EnsureCA("t")
	if err != nil {
		t.Fatal(err)
	}
	write := func() *x509.Certificate {
		c, k, err := ca.Issue(pki.Request{CommonName: pki.NodeUser("n1"), Usage: pki.ClientAuth})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Write("node", c, k); err != nil {
			t.Fatal(err)
		}
		cert, err := pki.CertFile(d.Files("node").Cert)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	first := write()
	tc, err := d.Files("node").ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	leaf := func() *x509.Certificate {
		c, err := tc.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf
	}
	if !leaf().Equal(first) {
		t.Fatal("client presents another certificate")
	}
	second := write()
	if got := leaf(); !got.Equal(second) {
		t.Errorf("after replacing the files the client presents serial %v, want %v", got.SerialNumber, second.SerialNumber)
	}
	// A key file that does not match (half-way through a replacement):
	// the last good pair stays.
	c, _, err := ca.Issue(pki.Request{CommonName: "x", Usage: pki.ClientAuth})
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteFile(d.Files("node").Cert, c, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := leaf(); !got.Equal(second) {
		t.Errorf("a mismatched pair replaced the good one")
	}
	if _, err := (pki.Files{CA: d.Files("node").CA, Cert: d.Files("node").Cert, Key: d.Files("node").Key}).ClientConfig(); err == nil {
		t.Errorf("a mismatched pair was accepted at start")
	}
	if got, ok := pki.NodeOf(pki.NodeUser("n1")); !ok || got != "n1" {
		t.Errorf("NodeOf(NodeUser(n1)) = %q %v", got, ok)
	}
	if _, ok := pki.NodeOf(pki.AdminUser); ok {
		t.Errorf("admin is a node")
	}
}
