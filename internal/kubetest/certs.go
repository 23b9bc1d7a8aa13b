package kubetest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// ca is a throwaway certificate authority for one test cluster.
type ca struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func newCA(cn string) (*ca, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{cert: cert, key: key}, nil
}

// certSpec describes a leaf certificate.
type certSpec struct {
	cn     string
	orgs   []string
	ips    []netip.Addr
	dns    []string
	server bool
	client bool
}

// issue writes name.crt and name.key (0600) into dir and returns their paths.
func (c *ca) issue(dir, name string, s certSpec) (certFile, keyFile string, err error) {
	key, err := newKey()
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     s.dns,
	}
	for _, ip := range s.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	if s.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return "", "", fmt.Errorf("issue %s: %w", name, err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return "", "", err
	}
	if err := writeKey(keyFile, key); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// writeCA writes the CA certificate as name.crt and returns its path.
func (c *ca) writeCA(dir, name string) (string, error) {
	p := filepath.Join(dir, name+".crt")
	return p, writePEM(p, "CERTIFICATE", c.cert.Raw, 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// writeServiceAccountKey writes the key pair service-account tokens are
// signed (sa.key) and checked (sa.pub) with.
func writeServiceAccountKey(dir string) (keyFile, pubFile string, err error) {
	key, err := newKey()
	if err != nil {
		return "", "", err
	}
	keyFile, pubFile = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := writeKey(keyFile, key); err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", err
	}
	return keyFile, pubFile, writePEM(pubFile, "PUBLIC KEY", der, 0o644)
}
