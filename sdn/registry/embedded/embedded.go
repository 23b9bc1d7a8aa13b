// Package embedded starts a single-member etcd server inside the calling
// process (gvs-master's default registry, and tests).
package embedded

import (
	"fmt"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Config says where the member keeps its data and listens.
type Config struct {
	// Dir is the data directory (created if missing).
	Dir string
	// ClientURL is e.g. http://127.0.0.1:2379; "" picks a free loopback port.
	ClientURL string
	// PeerURL is e.g. http://127.0.0.1:2380; "" picks a free loopback port.
	PeerURL string
	// LogLevel is etcd's zap level ("error" by default).
	LogLevel string
}

// Server is a running embedded etcd.
type Server struct {
	e         *embed.Etcd
	ClientURL string
}

// Start starts the member and waits until it serves.
func Start(c Config) (*Server, error) {
	var err error
	if c.ClientURL == "" {
		if c.ClientURL, err = freeURL(); err != nil {
			return nil, err
		}
	}
	if c.PeerURL == "" {
		if c.PeerURL, err = freeURL(); err != nil {
			return nil, err
		}
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

func freeURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "http://" + l.Addr().String(), nil
}
