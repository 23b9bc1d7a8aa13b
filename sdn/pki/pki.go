// Package pki is gvs's small certificate authority: it creates the
// cluster CA that gvs-master makes on first start, issues the certificates
// of the control plane (etcd servers and peers, gvs-master, nodes,
// administrators), keeps them on disk with private keys readable by their
// owner only, and builds the TLS configurations that use them, reloading a
// replaced certificate without a restart (docs/security.md).
//
// Identities are certificate common names: etcd, run with client
// certificate authentication, takes a client certificate's common name as
// its user name (sdn/registry grants each user its role). The names gvs
// uses are MasterUser, AdminUser and NodeUser(name).
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Identities (certificate common names, which are etcd user names).
const (
	// MasterUser is gvs-master's identity.
	MasterUser = "gvs-master"
	// AdminUser is the administrator identity gvs-master issues for
	// itself on first start (gvsctl projects, nodes).
	AdminUser = "admin"
	// nodePrefix starts every node identity.
	nodePrefix = "node:"
	// AdminOrganization is the organization (O) of the administrator
	// certificates gvs-master cert admin issues: services other than etcd
	// (the nodes' trace endpoints, sdn/why) know an administrator by it,
	// since only etcd holds the users' roles.
	AdminOrganization = "gvs-admins"
)

// NodeUser is the identity of node name: "node:" + name.
func NodeUser(name string) string { return nodePrefix + name }

// NodeServerName is the DNS name in node name's certificate, by which a
// client of the node's trace endpoint (sdn/why) verifies it:
// NAME.node.gvs.invalid. The .invalid domain (RFC 2606) never resolves,
// so no etcd endpoint or other server of the cluster can be named so, and
// a node's certificate cannot pass for one of them.
func NodeServerName(name string) string { return name + ".node.gvs.invalid" }

// NodeOf returns the node a node identity names, and whether it is one.
func NodeOf(user string) (string, bool) {
	n, ok := strings.CutPrefix(user, nodePrefix)
	return n, ok && n != ""
}

// Default validities.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 365 * 24 * time.Hour
)

// Sentinel errors.
var (
	// ErrNoCAKey: the CA was loaded without its private key and cannot
	// sign (an operator's own CA, kept elsewhere).
	ErrNoCAKey = errors.New("pki: the CA's private key is not available; issue certificates with your own CA")
	// ErrBadRequest: a certificate request is incomplete or malformed.
	ErrBadRequest = errors.New("pki: bad certificate request")
)

// Usage says what a certificate may be used for.
type Usage uint8

// Usages; they combine.
const (
	ClientAuth Usage = 1 << iota // TLS client
	ServerAuth                   // TLS server
)

// Request describes a certificate to issue.
type Request struct {
	// CommonName is the identity (a user name for etcd).
	CommonName string
	// Organization is optional.
	Organization []string
	// Usage is ClientAuth, ServerAuth or both (etcd members use their
	// server certificate as a client too, for their own gateway and their
	// peers, so server certificates should carry both).
	Usage Usage
	// DNSNames and IPs are the subject alternative names of a server.
	DNSNames []string
	IPs      []netip.Addr
	// NotBefore defaults to one minute ago (some clock skew), NotAfter to
	// NotBefore + CertValidity.
	NotBefore, NotAfter time.Time
}

// CA is a certificate authority: its certificate and, when it can sign, its
// private key.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer // nil: cannot sign
}

// NewCA creates a self-signed CA named name, valid for validity (0 means
// CAValidity), with a fresh ECDSA P-256 key.
func NewCA(name string, validity time.Duration) (*CA, error) {
	if validity == 0 {
		validity = CAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key}, nil
}

// CanSign reports whether the CA holds its private key.
func (ca *CA) CanSign() bool { return ca.key != nil }

// KeyPEM returns the CA's private key in PEM (PKCS #8), or ErrNoCAKey.
func (ca *CA) KeyPEM() ([]byte, error) {
	if ca.key == nil {
		return nil, ErrNoCAKey
	}
	return marshalKey(ca.key)
}

// Issue signs a certificate for req with a fresh ECDSA P-256 key and
// returns both in PEM.
func (ca *CA) Issue(req Request) (certPEM, keyPEM []byte, err error) {
	if ca.key == nil {
		return nil, nil, ErrNoCAKey
	}
	if req.CommonName == "" {
		return nil, nil, fmt.Errorf("%w: no common name", ErrBadRequest)
	}
	if req.Usage&(ClientAuth|ServerAuth) == 0 {
		return nil, nil, fmt.Errorf("%w: %s: no usage", ErrBadRequest, req.CommonName)
	}
	if req.Usage&ServerAuth != 0 && len(req.DNSNames) == 0 && len(req.IPs) == 0 {
		return nil, nil, fmt.Errorf("%w: %s: a server certificate needs DNS names or IP addresses", ErrBadRequest, req.CommonName)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	nb, na := req.NotBefore, req.NotAfter
	if nb.IsZero() {
		nb = time.Now().Add(-time.Minute)
	}
	if na.IsZero() {
		na = nb.Add(CertValidity)
	}
	if !na.After(nb) {
		return nil, nil, fmt.Errorf("%w: %s: NotAfter %v is not after NotBefore %v", ErrBadRequest, req.CommonName, na, nb)
	}
	if na.After(ca.Cert.NotAfter) {
		na = ca.Cert.NotAfter // a certificate cannot outlive its CA
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: req.Organization},
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     req.DNSNames,
	}
	for _, ip := range req.IPs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	if req.Usage&ClientAuth != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if req.Usage&ServerAuth != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: certificate for %s: %w", req.CommonName, err)
	}
	kp, err := marshalKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), kp, nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial: %w", err)
	}
	return s, nil
}

func marshalKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("pki: key: %w", err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// ParseCA reads a CA from PEM; keyPEM may be nil (a CA that cannot sign).
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", cert.Subject.CommonName)
	}
	ca := &CA{Cert: cert, CertPEM: certPEM}
	if keyPEM == nil {
		return ca, nil
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("pki: CA key: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		if k, err = x509.ParseECPrivateKey(b.Bytes); err != nil {
			return nil, fmt.Errorf("pki: CA key: %w", err)
		}
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("pki: CA key cannot sign")
	}
	if !publicKeysEqual(signer.Public(), cert.PublicKey) {
		return nil, errors.New("pki: the CA key does not belong to the CA certificate")
	}
	ca.key = signer
	return ca, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// parseCert decodes the first certificate of a PEM text.
func parseCert(certPEM []byte) (*x509.Certificate, error) {
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.New("pki: no certificate in PEM text")
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("pki: %w", err)
			}
			return c, nil
		}
	}
}

// CertFile reads a certificate file (the first certificate in it).
func CertFile(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	c, err := parseCert(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// WriteFile writes data to path through a temporary file and a rename, so
// a reader (a TLS handshake reloading the file) sees the old or the new
// content, never a part. Keys get mode 0600, certificates 0644.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	ok = true
	return nil
}
