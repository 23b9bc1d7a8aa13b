package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/console"
	"github.com/gvswitch/gvs/sdn/kube"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
)

// consoleName is the console's serving certificate in the PKI directory.
const consoleName = "console"

// consoleTLS issues (or loads) the console's serving certificate from the
// PKI directory's CA (the cluster CA in the etcd mode; in the Kubernetes
// mode a CA of gvs-master's own), for the console address's host, localhost
// and the certSANs. clientCAs, when set, lets browsers present a client
// certificate of that CA.
func consoleTLS(fc fileConfig, clientCAs bool, log *slog.Logger) (*tls.Config, error) {
	d := pki.Dir(fc.PKIDir)
	ca, created, err := d.EnsureCA("gvs cluster CA")
	if err != nil {
		return nil, err
	}
	if created {
		log.Info("created a CA for the console's certificate", "dir", fc.PKIDir)
	}
	req, err := sanRequest(consoleName, []string{"https://" + fc.ConsoleAddr}, fc.CertSANs)
	if err != nil {
		return nil, err
	}
	req.Usage = pki.ServerAuth
	f, issued, err := ensure(d, ca, consoleName, req)
	if err != nil {
		return nil, err
	}
	if issued {
		log.Info("issued the console's certificate", "cert", f.Cert)
	}
	kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{kp}}
	if clientCAs {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("console: no CA certificate in " + f.CA)
		}
		// Verified when given; console.CertAuth refuses a request without.
		cfg.ClientAuth, cfg.ClientCAs = tls.VerifyClientCertIfGiven, pool
	}
	return cfg, nil
}

// serveConsole serves h over TLS on addr until ctx is done.
func serveConsole(ctx context.Context, log *slog.Logger, addr string, cfg *tls.Config, h http.Handler) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	// No read or write timeout: the event streams are long-lived
	// responses (a read deadline would end them too).
	srv := &http.Server{Handler: h, TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("console serving", "url", "https://"+l.Addr().String())
	if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console: %w", err)
	}
	return nil
}

// startRegistryConsole starts the console of the etcd mode: client
// certificates of the cluster CA, the registry, and the nodes' trace
// endpoints reached with gvs-master's own certificate.
func startRegistryConsole(ctx context.Context, log *slog.Logger, fc fileConfig, reg *registry.Registry, master pki.Files) (<-chan error, error) {
	if fc.ConsoleAddr == "" {
		return nil, nil
	}
	if fc.Insecure {
		return nil, errors.New("console: not served with --insecure (it needs the cluster CA to authenticate)")
	}
	tcfg, err := consoleTLS(fc, true, log)
	if err != nil {
		return nil, err
	}
	cc, err := master.ClientConfig()
	if err != nil {
		return nil, err
	}
	nodes := &console.TraceNodes{TLS: cc, Find: console.RegistryEndpoints(reg)}
	srv, err := console.New(console.Config{Source: &console.RegistrySource{Reg: reg, Nodes: nodes},
		Auth: console.CertAuth{}, Tracer: nodes, Pods: nodes, Log: log})
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- serveConsole(ctx, log, fc.ConsoleAddr, tcfg, srv) }()
	return errc, nil
}

// startKubeConsole starts the console of the Kubernetes mode: bearer
// tokens checked with the API server, which also says what each may see.
func startKubeConsole(ctx context.Context, log *slog.Logger, fc fileConfig, k *kubeFlags) (<-chan error, error) {
	if fc.ConsoleAddr == "" {
		return nil, nil
	}
	rc, err := kube.RESTConfig(*k.kubeconfig)
	if err != nil {
		return nil, err
	}
	tcfg, err := consoleTLS(fc, false, log)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	nc, err := networkv1.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	id, err := kubeTraceIdentity(fc)
	if err != nil {
		return nil, err
	}
	nodes := &console.TraceNodes{TLS: id, Find: console.KubeEndpoints(nc)}
	src := &console.KubeSource{Client: kc, Network: nc, Nodes: nodes}
	srv, err := console.New(console.Config{Source: src, Auth: &console.TokenAuth{Client: kc, Projects: src.Projects},
		Tracer: nodes, Pods: nodes, Login: true, Log: log})
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- serveConsole(ctx, log, fc.ConsoleAddr, tcfg, srv) }()
	return errc, nil
}

// kubeTraceIdentity is gvs-master's client identity for the nodes' trace
// endpoints in the Kubernetes mode: its certificate (gvs-master.crt,
// issued at start) from the CA of its PKI directory. The nodes serve their
// endpoints with certificates of a gvs cluster CA given to them as files
// (gvs-switchd's traceTLS); when that is this CA (issued with gvs-master
// cert node NAME -pki-dir PKI-DIR -no-authorize), the console's matrix,
// "why" page and traffic counters work; otherwise they say the nodes
// refused.
func kubeTraceIdentity(fc fileConfig) (*tls.Config, error) {
	d := pki.Dir(fc.PKIDir)
	ca, _, err := d.EnsureCA("gvs cluster CA")
	if err != nil {
		return nil, err
	}
	f, _, err := ensure(d, ca, pki.MasterUser, pki.Request{CommonName: pki.MasterUser, Usage: pki.ClientAuth})
	if err != nil {
		return nil, err
	}
	return f.ClientConfig()
}
