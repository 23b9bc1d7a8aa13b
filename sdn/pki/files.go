package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Files names the PEM files of one TLS identity: the CA certificates it
// trusts, its certificate and its private key.
type Files struct {
	CA   string `json:"caFile"`
	Cert string `json:"certFile"`
	Key  string `json:"keyFile"`
}

// IsZero reports whether no file is named.
func (f Files) IsZero() bool { return f == Files{} }

// Validate checks that all three files are named and readable, that the
// certificate and the key belong together, and that the certificate is
// within its validity period.
func (f Files) Validate() error {
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return errors.New("pki: a CA file, a certificate file and a key file are all required")
	}
	if _, err := f.pool(); err != nil {
		return err
	}
	kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return fmt.Errorf("pki: %s, %s: %w", f.Cert, f.Key, err)
	}
	now := time.Now()
	if c := kp.Leaf; c != nil && (now.Before(c.NotBefore) || now.After(c.NotAfter)) {
		return fmt.Errorf("pki: %s is valid from %v to %v, not now", f.Cert, c.NotBefore, c.NotAfter)
	}
	return nil
}

func (f Files) pool() (*x509.CertPool, error) {
	b, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("pki: CA file: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("pki: %s holds no certificate", f.CA)
	}
	return p, nil
}

// Client is a TLS client identity from Files: its configuration, and the
// certificate it last presented to a server.
type Client struct {
	// Config trusts only the certificates of the CA file and presents the
	// certificate and key files. The key pair is read again at the next
	// handshake after either file changed, so a replaced certificate is
	// used from the next connection on without a restart (connections
	// already open keep theirs). The CA file is read once: trusting a new
	// CA takes a restart (docs/security.md).
	Config *tls.Config
	kp     *keyPair
}

// Presented returns the certificate the client last presented in a
// handshake (nil before the first).
func (c *Client) Presented() *x509.Certificate {
	c.kp.mu.Lock()
	defer c.kp.mu.Unlock()
	return c.kp.presented
}

// NewClient loads f as a client identity (see Client.Config).
func (f Files) NewClient() (*Client, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	pool, err := f.pool()
	if err != nil {
		return nil, err
	}
	kp := &keyPair{cert: f.Cert, key: f.Key}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	return &Client{kp: kp, Config: &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := kp.get()
			if err == nil {
				kp.mu.Lock()
				kp.presented = c.Leaf
				kp.mu.Unlock()
			}
			return c, err
		},
	}}, nil
}

// ClientConfig is NewClient's configuration.
func (f Files) ClientConfig() (*tls.Config, error) {
	c, err := f.NewClient()
	if err != nil {
		return nil, err
	}
	return c.Config, nil
}

// keyPair is a certificate and key file pair, re-read when either file's
// modification time or size changes.
type keyPair struct {
	cert, key string

	mu        sync.Mutex
	stamp     [2]fileStamp
	current   *tls.Certificate
	presented *x509.Certificate
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: st.ModTime(), size: st.Size()}, nil
}

func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cs, err1 := stampOf(k.cert)
	ks, err2 := stampOf(k.key)
	if err := errors.Join(err1, err2); err != nil {
		if k.current != nil {
			return k.current, nil // a file being replaced: keep the last good pair
		}
		return nil, fmt.Errorf("pki: %w", err)
	}
	if k.current != nil && k.stamp == [2]fileStamp{cs, ks} {
		return k.current, nil
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.current != nil {
			return k.current, nil // half-written: the other file has not changed yet
		}
		return nil, fmt.Errorf("pki: %s, %s: %w", k.cert, k.key, err)
	}
	k.current, k.stamp = &c, [2]fileStamp{cs, ks}
	return k.current, nil
}

// Dir is a directory of PEM files: ca.crt and ca.key, and NAME.crt and
// NAME.key for each identity (gvs-master's data directory's pki/).
type Dir string

// File names in a Dir.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// Files returns the file names of identity name in d.
func (d Dir) Files(name string) Files {
	return Files{
		CA:   filepath.Join(string(d), CACertFile),
		Cert: filepath.Join(string(d), name+".crt"),
		Key:  filepath.Join(string(d), name+".key"),
	}
}

// LoadCA reads the CA of d: ca.crt, and ca.key when present (without it
// the CA cannot sign: an operator's own CA).
func (d Dir) LoadCA() (*CA, error) {
	cert, err := os.ReadFile(filepath.Join(string(d), CACertFile))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	key, err := os.ReadFile(filepath.Join(string(d), CAKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		key = nil
	} else if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return ParseCA(cert, key)
}

// EnsureCA loads the CA of d, or creates one named name when d has no
// ca.crt (created reports it). An existing ca.crt is never replaced.
func (d Dir) EnsureCA(name string) (ca *CA, created bool, err error) {
	ca, err = d.LoadCA()
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return ca, false, err
	}
	if _, err := os.Stat(filepath.Join(string(d), CAKeyFile)); err == nil {
		return nil, false, fmt.Errorf("pki: %s has %s but no %s", d, CAKeyFile, CACertFile)
	}
	if ca, err = NewCA(name, 0); err != nil {
		return nil, false, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, false, err
	}
	// The key first: a ca.crt without its key would read as an
	// operator's CA that cannot sign.
	if err := WriteFile(filepath.Join(string(d), CAKeyFile), key, 0o600); err != nil {
		return nil, false, err
	}
	if err := WriteFile(filepath.Join(string(d), CACertFile), ca.CertPEM, 0o644); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// Write stores an identity's certificate and key in d (the key 0600).
func (d Dir) Write(name string, certPEM, keyPEM []byte) (Files, error) {
	f := d.Files(name)
	if err := WriteFile(f.Key, keyPEM, 0o600); err != nil {
		return f, err
	}
	if err := WriteFile(f.Cert, certPEM, 0o644); err != nil {
		return f, err
	}
	return f, nil
}

// Ensure returns identity name's files in d, issuing them with ca when the
// certificate is missing, does not belong to ca, expires within renewBefore,
// or (for a server) lacks one of req's names. Issued reports whether it
// issued a new pair.
func (d Dir) Ensure(ca *CA, name string, req Request, renewBefore time.Duration) (f Files, issued bool, err error) {
	f = d.Files(name)
	if ok, _ := d.current(ca, f, req, renewBefore); ok {
		return f, false, nil
	}
	cert, key, err := ca.Issue(req)
	if err != nil {
		return f, false, err
	}
	if _, err := d.Write(name, cert, key); err != nil {
		return f, false, err
	}
	return f, true, nil
}

// current reports whether f's certificate is one ca issued for req that is
// still good for renewBefore.
func (d Dir) current(ca *CA, f Files, req Request, renewBefore time.Duration) (bool, error) {
	kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return false, err
	}
	c := kp.Leaf
	if c == nil || c.Subject.CommonName != req.CommonName || time.Until(c.NotAfter) < renewBefore {
		return false, nil
	}
	if err := c.CheckSignatureFrom(ca.Cert); err != nil {
		return false, nil
	}
	for _, n := range req.DNSNames {
		if c.VerifyHostname(n) != nil {
			return false, nil
		}
	}
	for _, ip := range req.IPs {
		if c.VerifyHostname(ip.String()) != nil {
			return false, nil
		}
	}
	return true, nil
}

// WriteBundle writes the CA certificate and an identity's certificate and
// key into dir as ca.crt, name.crt and name.key: what a node or an
// administrator needs.
func WriteBundle(dir, name string, ca *CA, certPEM, keyPEM []byte) (Files, error) {
	d := Dir(dir)
	if err := WriteFile(filepath.Join(dir, CACertFile), ca.CertPEM, 0o644); err != nil {
		return Files{}, err
	}
	return d.Write(name, certPEM, keyPEM)
}
