// Package embedded starts a single-member etcd server inside the calling
// process: gvs-master's default registry, and tests.
//
// With TLS configured the member serves clients and its peer URL over TLS
// and requires client certificates signed by the given CA; etcd then takes
// a client certificate's common name as the user, whose roles
// sdn/registry's SetupAuth sets up. The member re-reads its certificate
// and key files at every new connection, so they can be replaced while it
// runs (docs/security.md).
package embedded

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/gvswitch/gvs/sdn/pki"
)

// Config says where the member keeps its data and listens.
type Config struct {
	// Dir is the data directory (created if missing).
	Dir string
	// ClientURL is where clients connect: https://HOST:PORT or
	// unixs:///PATH with TLS, http:// or unix:// without. Required.
	ClientURL string
	// PeerURL is the member's peer URL (a single member listens on it but
	// nothing connects): https:// with TLS, http:// without. Required.
	PeerURL string
	// TLS is the member's server certificate and key, and the CA whose
	// client certificates it accepts. Required for https and unixs URLs.
	TLS pki.Files
	// PeerTLS is the certificate of the peer URL (default TLS).
	PeerTLS pki.Files
	// LogLevel is etcd's zap level ("error" by default).
	LogLevel string
}

// Server is a running embedded etcd.
type Server struct {
	e         *embed.Etcd
	ClientURL string
}

func tlsInfo(f pki.Files) transport.TLSInfo {
	return transport.TLSInfo{CertFile: f.Cert, KeyFile: f.Key, TrustedCAFile: f.CA, ClientCertAuth: true}
}

// Start starts the member and waits until it serves.
func Start(c Config) (*Server, error) {
	if c.ClientURL == "" || c.PeerURL == "" {
		return nil, errors.New("embedded etcd: ClientURL and PeerURL are required")
	}
	cu, err := url.Parse(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("client URL: %w", err)
	}
	pu, err := url.Parse(c.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("peer URL: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "gvs-master"
	cfg.Dir = c.Dir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = c.LogLevel
	if cfg.LogLevel == "" {
		cfg.LogLevel = "error"
	}
	secureClient := cu.Scheme == "https" || cu.Scheme == "unixs"
	if secureClient != (pu.Scheme == "https") {
		return nil, errors.New("embedded etcd: client and peer URLs must both use TLS or both not")
	}
	if secureClient {
		if err := c.TLS.Validate(); err != nil {
			return nil, fmt.Errorf("embedded etcd: server certificate: %w", err)
		}
		peer := c.PeerTLS
		if peer.IsZero() {
			peer = c.TLS
		}
		cfg.ClientTLSInfo = tlsInfo(c.TLS)
		cfg.PeerTLSInfo = tlsInfo(peer)
		cfg.ClientAutoTLS, cfg.PeerAutoTLS = false, false
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd: not ready after 60s")
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	return &Server{e: e, ClientURL: c.ClientURL}, nil
}

// Close stops the member.
func (s *Server) Close() { s.e.Close() }

// Err reports a fatal server error.
func (s *Server) Err() <-chan error { return s.e.Err() }
