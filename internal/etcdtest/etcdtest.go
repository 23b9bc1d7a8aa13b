// Package etcdtest runs etcd for tests as gvs-master runs it: TLS with
// client certificates, and etcd's authentication on with gvs's users and
// roles (sdn/registry SetupAuth). Nothing listens in the machine's own
// network namespace: clients connect over a unix socket in a temporary
// directory and the peer listener lives in a network namespace the test
// creates, so the tests need root and skip without it.
//
// Two servers: Embedded (gvs-master's in-process etcd) and External
// (Debian's etcd-server, /usr/bin/etcd, as a process in the namespace).
package etcdtest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/internal/nstest"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/sdn/registry/embedded"
)

// Kind is which etcd server runs.
type Kind int

// Kinds.
const (
	Embedded Kind = iota // sdn/registry/embedded, in the test process
	External             // Debian's etcd-server (ExternalBinary), a process
)

func (k Kind) String() string {
	if k == External {
		return "external"
	}
	return "embedded"
}

// ExternalBinary is Debian's etcd server.
const ExternalBinary = "/usr/bin/etcd"

// Options configures Start.
type Options struct {
	Kind Kind
	// Insecure runs without TLS and without authentication (the
	// explicitly insecure lab mode).
	Insecure bool
}

// Etcd is a running test etcd. Its methods are for the test's goroutine.
type Etcd struct {
	t    testing.TB
	opts Options
	dir  string
	// PKI holds the test CA and every identity's files.
	PKI pki.Dir
	// CA is the cluster CA.
	CA *pki.CA
	// ClientURL is the endpoint clients dial.
	ClientURL string
	netns     string

	mu   sync.Mutex
	srv  *embedded.Server
	proc *exec.Cmd
	done chan struct{}
}

// Skip skips t unless it runs as root, and, for External, unless the
// binary is installed (a failure instead when $CI is set: make test
// installs it).
func Skip(t testing.TB, k Kind) {
	t.Helper()
	nstest.RequireRoot(t)
	if k == External {
		if _, err := os.Stat(ExternalBinary); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s: %v (make deps installs etcd-server)", ExternalBinary, err)
			}
			t.Skipf("%s: %v", ExternalBinary, err)
		}
	}
}

// Start starts an etcd as opts says, sets up gvs's users and roles (unless
// insecure) and stops it when the test ends.
func Start(t testing.TB, opts Options) *Etcd {
	t.Helper()
	Skip(t, opts.Kind)
	// A short directory: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "gvs-etcd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &Etcd{t: t, opts: opts, dir: dir, PKI: pki.Dir(filepath.Join(dir, "pki"))}
	e.netns = nstest.New(t, "etcd", fmt.Sprintf("%d", time.Now().UnixNano()%1e6))
	if err := nstest.Do(e.netns, loopbackUp); err != nil {
		t.Fatal(err)
	}
	if e.CA, _, err = e.PKI.EnsureCA("gvs test CA"); err != nil {
		t.Fatal(err)
	}
	scheme := "unixs"
	if opts.Insecure {
		scheme = "unix"
	}
	// The client socket is named localhost: etcd's client takes a unix
	// socket's file name as the TLS server name.
	switch opts.Kind {
	case Embedded:
		e.ClientURL = scheme + "://" + filepath.Join(dir, "localhost")
	case External:
		// etcd 3.4 wants unix URLs of the form host:port, a file in its
		// working directory (dir).
		e.ClientURL = scheme + "://" + filepath.Join(dir, "localhost:2379")
	}
	if !opts.Insecure {
		req := pki.Request{CommonName: "etcd-server", Usage: pki.ServerAuth | pki.ClientAuth,
			DNSNames: []string{"localhost"}, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
		if _, _, err := e.PKI.Ensure(e.CA, "etcd-server", req, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.Restart()
	t.Cleanup(e.Stop)
	if !opts.Insecure {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Dial(t, pki.MasterUser).SetupAuth(ctx); err != nil {
			t.Fatalf("etcd auth setup: %v", err)
		}
	}
	return e
}

func loopbackUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}

// Restart starts the server again on its data (after Stop).
func (e *Etcd) Restart() {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv != nil || e.proc != nil {
		return
	}
	var err error
	switch e.opts.Kind {
	case Embedded:
		err = e.startEmbedded()
	case External:
		err = e.startExternal()
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *Etcd) startEmbedded() error {
	peer := "https://127.0.0.1:2380"
	if e.opts.Insecure {
		peer = "http://127.0.0.1:2380"
	}
	cfg := embedded.Config{Dir: filepath.Join(e.dir, "data"), ClientURL: e.ClientURL, PeerURL: peer, LogLevel: "fatal"}
	if !e.opts.Insecure {
		cfg.TLS = e.PKI.Files("etcd-server")
	}
	// The peer listener is made in the test's namespace; the client
	// socket is a file.
	return nstest.Do(e.netns, func() error {
		srv, err := embedded.Start(cfg)
		e.srv = srv
		return err
	})
}

func (e *Etcd) startExternal() error {
	scheme, peer := "unixs", "https://127.0.0.1:2380"
	if e.opts.Insecure {
		scheme, peer = "unix", "http://127.0.0.1:2380"
	}
	client := scheme + "://localhost:2379"
	args := []string{"netns", "exec", e.netns, ExternalBinary, "--name", "m1",
		"--data-dir", filepath.Join(e.dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m1=" + peer, "--log-level", "error"}
	if !e.opts.Insecure {
		f := e.PKI.Files("etcd-server")
		args = append(args, "--cert-file", f.Cert, "--key-file", f.Key, "--trusted-ca-file", f.CA, "--client-cert-auth",
			"--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-trusted-ca-file", f.CA, "--peer-client-cert-auth")
	}
	log, err := os.OpenFile(filepath.Join(e.dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("ip", args...)
	cmd.Dir = e.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.proc, e.done = cmd, done
	// Ready when a client gets an answer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := e.ping(); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(e.dir, "etcd.log"))
			return fmt.Errorf("etcd did not come up: %v\n%s", err, b)
		}
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(e.dir, "etcd.log"))
			return fmt.Errorf("etcd exited:\n%s", b)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ping asks the server for its status as the master.
func (e *Etcd) ping() error {
	c, err := registry.Dial(e.DialConfig(pki.MasterUser))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = c.Status(ctx, c.Endpoints()[0])
	return err
}

// Stop stops the server (data kept for Restart). Stopping a stopped server
// does nothing.
func (e *Etcd) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv != nil {
		e.srv.Close()
		e.srv = nil
	}
	if e.proc != nil {
		_ = syscall.Kill(-e.proc.Process.Pid, syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-e.proc.Process.Pid, syscall.SIGKILL)
			<-e.done
		}
		e.proc = nil
	}
}

// Files returns the TLS files of a client identity (a certificate with
// common name user, issued by the test CA on first use).
func (e *Etcd) Files(user string) pki.Files {
	e.t.Helper()
	name := strings.ReplaceAll(user, ":", "_")
	f, _, err := e.PKI.Ensure(e.CA, name, pki.Request{CommonName: user, Usage: pki.ClientAuth}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

// DialConfig is how user reaches the server.
func (e *Etcd) DialConfig(user string) registry.DialConfig {
	c := registry.DialConfig{Endpoints: []string{e.ClientURL}, Insecure: e.opts.Insecure, DialTimeout: 5 * time.Second}
	if !e.opts.Insecure {
		c.TLS = e.Files(user)
	}
	return c
}

// Client dials the server as user; the client is closed when the test ends.
func (e *Etcd) Client(t testing.TB, user string) *clientv3.Client {
	t.Helper()
	c, err := registry.Dial(e.DialConfig(user))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Dial is Client wrapped as a registry.
func (e *Etcd) Dial(t testing.TB, user string) *registry.Registry {
	t.Helper()
	return registry.New(e.Client(t, user))
}

// AuthorizeNode creates node name's etcd user (as gvs-master does when it
// issues the node's certificate) and returns its client identity.
func (e *Etcd) AuthorizeNode(t testing.TB, name string) string {
	t.Helper()
	if e.opts.Insecure {
		return pki.NodeUser(name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Dial(t, pki.MasterUser).AuthorizeNode(ctx, name); err != nil {
		t.Fatal(err)
	}
	return pki.NodeUser(name)
}
