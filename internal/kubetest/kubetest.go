// Package kubetest runs a real Kubernetes API server for gvs's tests: the
// kube-apiserver built by `make kube-tools` (tools/kube), against etcd,
// both inside a network namespace of a lab lab, with a CA, serving
// and client certificates and a service-account key made for the test.
// The test process reaches it through a dialer that opens its sockets in
// that namespace; nothing listens in the machine's own namespace.
//
// Authorization is RBAC (and Node), so a test can check what a
// ServiceAccount is refused. The API server's etcd is Debian's etcd-server,
// started in the same namespace with TLS client certificates, or any etcd
// given by Options.Etcd (its CA, certificate and key are passed through as
// --etcd-cafile/--etcd-certfile/--etcd-keyfile).
package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gvswitch/gvs/lab"
)

// Binaries the harness runs.
const (
	APIServerBinary = "kube-apiserver"
	KubeProxyBinary = "kube-proxy"
	EtcdBinary      = "/usr/bin/etcd"
)

// Ports inside the namespace: away from 2379/2380, which gvs-master's
// embedded etcd uses by default.
const (
	APIServerPort = 6443
	etcdPort      = 12379
	etcdPeerPort  = 12380
)

// DefaultServiceCIDR is the service network when Options.ServiceCIDR is unset.
const DefaultServiceCIDR = "172.30.0.0/16"

// ErrNoBinary means a binary the harness needs is missing.
var ErrNoBinary = errors.New("kubetest: binary missing (run make kube-tools; etcd: make deps)")

// Etcd is an etcd cluster the API server stores its data in.
type Etcd struct {
	// Endpoints are client URLs (https:// with the files below).
	Endpoints []string
	// CAFile verifies the etcd servers; CertFile and KeyFile are the API
	// server's client certificate. All empty for plain http.
	CAFile, CertFile, KeyFile string
}

// Options says where and how to run the API server.
type Options struct {
	// Lab and NS: the namespace of the lab the processes run in. Required.
	Lab *lab.Lab
	NS  string
	// Addr is an address of NS the API server (and its etcd) listen on and
	// advertise. Required.
	Addr netip.Addr
	// Dir holds the certificates, etcd's data, the kubeconfig and the logs
	// (default <lab state dir>/kube).
	Dir string
	// BinDir holds kube-apiserver (default: BinDir()).
	BinDir string
	// ServiceCIDR is --service-cluster-ip-range (default DefaultServiceCIDR).
	ServiceCIDR netip.Prefix
	// Etcd, if not nil, is used instead of starting Debian's etcd.
	Etcd *Etcd
	// Kubelets prepares the API server for real nodes (StartNode): it
	// talks to kubelets at their InternalIP with a client certificate and
	// checks their serving certificates, keeps the kubernetes Service's
	// endpoints (pods reach it through kube-proxy), and admits with
	// NodeRestriction.
	Kubelets bool
}

// Server is a running API server (and the etcd the harness started for
// it, if any).
type Server struct {
	// URL is https://Addr:6443, reachable inside the namespace.
	URL string
	// Dir is Options.Dir; CAFile the cluster CA; Kubeconfig an admin
	// kubeconfig for processes started in the namespace.
	Dir, CAFile, Kubeconfig string
	// Etcd is the etcd the API server uses.
	Etcd Etcd
	// Lab and NS are where the processes run (Options.Lab and NS); start
	// gvs processes that talk to the API server there.
	Lab *lab.Lab
	NS  string

	opts      Options
	ca        *ca
	adminCert string
	adminKey  string
	apiArgs   []string
	ctrl      []*lab.Proc
	etcd      *lab.Proc
	api       *lab.Proc
}

// BinDir returns the directory of the kube binaries: $GVS_KUBE_BIN, or the
// bin/ directory of the gvs module this process runs in (where
// `make kube-tools` puts them).
func BinDir() string {
	if d := os.Getenv("GVS_KUBE_BIN"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "bin")
}

// RepoRoot returns the root of the gvs module the working directory is in
// (tests run in their package's directory), or "." if there is none.
func RepoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/gvswitch/gvs\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}

// Missing returns the binaries the harness needs that are not there.
func Missing(binDir string) []string {
	var out []string
	for _, p := range []string{filepath.Join(binDir, APIServerBinary), EtcdBinary} {
		if _, err := os.Stat(p); err != nil {
			out = append(out, p)
		}
	}
	return out
}

// Start makes the certificates, starts etcd (unless Options.Etcd) and the
// API server in the namespace, and waits until /readyz answers.
func Start(ctx context.Context, o Options) (_ *Server, err error) {
	if o.Lab == nil || o.NS == "" || !o.Addr.IsValid() {
		return nil, errors.New("kubetest: Options.Lab, NS and Addr are required")
	}
	if o.Dir == "" {
		o.Dir = filepath.Join(o.Lab.StateDir(), "kube")
	}
	if o.BinDir == "" {
		o.BinDir = BinDir()
	}
	if !o.ServiceCIDR.IsValid() {
		o.ServiceCIDR = netip.MustParsePrefix(DefaultServiceCIDR)
	}
	if m := Missing(o.BinDir); len(m) > 0 && (o.Etcd == nil || len(m) > 1 || m[0] != EtcdBinary) {
		return nil, fmt.Errorf("%w: %s", ErrNoBinary, strings.Join(m, ", "))
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	s := &Server{URL: fmt.Sprintf("https://%s", netip.AddrPortFrom(o.Addr, APIServerPort)), Dir: o.Dir, Lab: o.Lab, NS: o.NS, opts: o}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	if err := s.makeCerts(); err != nil {
		return nil, err
	}
	if o.Etcd != nil {
		s.Etcd = *o.Etcd
	} else if err := s.startEtcd(ctx); err != nil {
		return nil, err
	}
	s.apiArgs = s.apiServerArgs()
	if err := s.StartAPIServer(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// makeCerts makes the CA, the API server's serving certificate, the admin
// client certificate (group system:masters), etcd's certificates and the
// service-account key, and writes the admin kubeconfig.
func (s *Server) makeCerts() error {
	var err error
	if s.ca, err = newCA("gvs-kubetest-ca"); err != nil {
		return err
	}
	if s.CAFile, err = s.ca.writeCA(s.Dir, "ca"); err != nil {
		return err
	}
	svcIP := s.opts.ServiceCIDR.Masked().Addr().Next() // the "kubernetes" Service
	if _, _, err = s.ca.issue(s.Dir, "apiserver", certSpec{cn: "kube-apiserver", server: true,
		ips: []netip.Addr{s.opts.Addr, netip.MustParseAddr("127.0.0.1"), svcIP},
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}}); err != nil {
		return err
	}
	if s.adminCert, s.adminKey, err = s.ca.issue(s.Dir, "admin", certSpec{cn: "gvs-admin", orgs: []string{"system:masters"}, client: true}); err != nil {
		return err
	}
	if _, _, err = s.ca.issue(s.Dir, "apiserver-kubelet-client", certSpec{cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true}); err != nil {
		return err
	}
	if _, _, err = writeServiceAccountKey(s.Dir); err != nil {
		return err
	}
	s.Kubeconfig = filepath.Join(s.Dir, "admin.kubeconfig")
	return s.WriteKubeconfig(s.Kubeconfig, &rest.Config{TLSClientConfig: rest.TLSClientConfig{CertFile: s.adminCert, KeyFile: s.adminKey}})
}

func (s *Server) startEtcd(ctx context.Context) error {
	cert, key, err := s.ca.issue(s.Dir, "etcd-server", certSpec{cn: "etcd", server: true, ips: []netip.Addr{s.opts.Addr, netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		return err
	}
	ccert, ckey, err := s.ca.issue(s.Dir, "etcd-client", certSpec{cn: "kube-apiserver-etcd-client", client: true})
	if err != nil {
		return err
	}
	client := fmt.Sprintf("https://%s", netip.AddrPortFrom(s.opts.Addr, etcdPort))
	peer := fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort)
	s.Etcd = Etcd{Endpoints: []string{client}, CAFile: s.CAFile, CertFile: ccert, KeyFile: ckey}
	s.etcd, err = s.opts.Lab.Start(ctx, s.opts.NS, filepath.Join(s.Dir, "etcd.log"), EtcdBinary,
		"--name", "kubetest", "--data-dir", filepath.Join(s.Dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "kubetest="+peer, "--initial-cluster-state", "new",
		"--cert-file", cert, "--key-file", key, "--trusted-ca-file", s.CAFile, "--client-cert-auth",
		"--log-level", "warn")
	if err != nil {
		return fmt.Errorf("kubetest: etcd: %w", err)
	}
	return nil
}

func (s *Server) apiServerArgs() []string {
	d := s.Dir
	args := []string{filepath.Join(s.opts.BinDir, APIServerBinary),
		"--advertise-address", s.opts.Addr.String(),
		"--bind-address", s.opts.Addr.String(),
		"--secure-port", fmt.Sprint(APIServerPort),
		"--service-cluster-ip-range", s.opts.ServiceCIDR.String(),
		"--etcd-servers", strings.Join(s.Etcd.Endpoints, ","),
		"--tls-cert-file", filepath.Join(d, "apiserver.crt"),
		"--tls-private-key-file", filepath.Join(d, "apiserver.key"),
		"--client-ca-file", s.CAFile,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(d, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(d, "sa.key"),
		"--authorization-mode", "Node,RBAC",
		"--anonymous-auth=false",
		// As in clusters that run a network plug-in: its DaemonSet
		// (deploy/gvs-node.yaml) is privileged.
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--cert-dir", filepath.Join(d, "generated"),
	}
	if s.opts.Kubelets {
		args = append(args, "--endpoint-reconciler-type", "lease",
			"--kubelet-preferred-address-types", "InternalIP",
			"--kubelet-client-certificate", filepath.Join(d, "apiserver-kubelet-client.crt"),
			"--kubelet-client-key", filepath.Join(d, "apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority", s.CAFile,
			"--enable-admission-plugins", "NodeRestriction")
	} else {
		// Without nodes no pod reaches the kubernetes Service, and a lab
		// namespace has no default route: nothing may depend on one.
		args = append(args, "--endpoint-reconciler-type", "none")
	}
	if s.Etcd.CAFile != "" {
		args = append(args, "--etcd-cafile", s.Etcd.CAFile, "--etcd-certfile", s.Etcd.CertFile, "--etcd-keyfile", s.Etcd.KeyFile)
	}
	return args
}

// StartAPIServer (re)starts the API server on the same etcd and waits
// until it is ready. It does nothing if it runs.
func (s *Server) StartAPIServer(ctx context.Context) error {
	if s.api != nil && !s.api.Exited() {
		return nil
	}
	p, err := s.opts.Lab.Start(ctx, s.opts.NS, filepath.Join(s.Dir, "kube-apiserver.log"), s.apiArgs...)
	if err != nil {
		return fmt.Errorf("kubetest: kube-apiserver: %w", err)
	}
	s.api = p
	return s.WaitReady(ctx)
}

// StopAPIServer stops the API server (etcd keeps running).
func (s *Server) StopAPIServer() error {
	if s.api == nil {
		return nil
	}
	return s.api.Stop()
}

// WaitReady waits until GET /readyz answers ok (or the API server exits,
// or ctx is done).
func (s *Server) WaitReady(ctx context.Context) error {
	kc, err := kubernetes.NewForConfig(s.Admin())
	if err != nil {
		return err
	}
	rc := kc.Discovery().RESTClient()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		body, err := rc.Get().AbsPath("/readyz").DoRaw(rctx)
		cancel()
		if err == nil && string(body) == "ok" {
			return nil
		}
		if s.api.Exited() {
			return fmt.Errorf("kubetest: kube-apiserver exited: %v\n%s", s.api.Wait(), s.LogTail(APIServerBinary, 40))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubetest: kube-apiserver not ready: %w (last: %v)\n%s", ctx.Err(), err, s.LogTail(APIServerBinary, 40))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LogTail returns the last n lines of the log of "kube-apiserver" or "etcd".
func (s *Server) LogTail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, name+".log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Stop stops the controllers, the API server and the etcd the harness
// started.
func (s *Server) Stop() error {
	var errs []error
	for _, p := range s.ctrl {
		errs = append(errs, p.Stop())
	}
	if s.api != nil {
		errs = append(errs, s.api.Stop())
	}
	if s.etcd != nil {
		errs = append(errs, s.etcd.Stop())
	}
	return errors.Join(errs...)
}

// Admin returns a client configuration with the admin certificate
// (system:masters) whose connections are made in the namespace, for use
// in this process.
func (s *Server) Admin() *rest.Config {
	return &rest.Config{
		Host: s.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: s.CAFile, CertFile: s.adminCert, KeyFile: s.adminKey,
		},
		Dial:    DialIn(lab.NSPath(s.opts.NS)),
		QPS:     100,
		Burst:   200,
		Timeout: 30 * time.Second,
	}
}

// WriteKubeconfig writes a kubeconfig for cfg's credentials (client
// certificate files or bearer token) and this server, for a process that
// runs inside the namespace.
func (s *Server) WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthority: s.CAFile}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{
		ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile, Token: cfg.BearerToken,
	}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "user"}
	kc.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*kc, path)
}
