// Command gvs-master is gvs's control plane: it publishes the cluster
// network configuration, allocates node subnets and project VNIDs (and
// creates the default and global projects, and the projects nodes ask for)
// in an etcd v3 registry. By default it runs an embedded single-member etcd
// with its data on disk; with --etcd-endpoints it uses an external etcd
// cluster instead, with the same key layout. Several gvs-master processes
// may share one registry.
//
// Every connection to etcd is TLS with client certificates, and etcd's
// users and roles give each node write access to its own record only. On
// first start gvs-master makes a cluster CA and the certificates it needs
// in its data directory (pki/, keys 0600); `gvs-master cert` issues a
// node's or an administrator's (cert.go; docs/security.md).
//
// With --kubeconfig or --in-cluster it follows a Kubernetes API server
// instead of etcd (kube.go; docs/kubernetes.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/sdn/registry/embedded"
)

func main() {
	args := os.Args[1:]
	var err error
	switch {
	case len(args) > 0 && args[0] == "cert":
		err = certCmd(args[1:], os.Stdout)
	case len(args) > 0 && (args[0] == "authorize-node" || args[0] == "revoke-node"):
		err = nodeAuthCmd(args[0], args[1:], os.Stdout)
	case len(args) > 0 && args[0] == "serve":
		err = run(args[1:])
	default:
		err = run(args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gvs-master:", err)
		os.Exit(1)
	}
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, strings.Split(s, ",")...); return nil }

// fileConfig is the optional --config file (JSON); flags override it.
type fileConfig struct {
	registry.Config
	EtcdEndpoints []string `json:"etcdEndpoints,omitempty"`
	DataDir       string   `json:"dataDir,omitempty"`
	ClientURL     string   `json:"clientURL,omitempty"`
	PeerURL       string   `json:"peerURL,omitempty"`
	// PKIDir holds the CA and certificates (default DataDir/pki).
	PKIDir string `json:"pkiDir,omitempty"`
	// CertSANs are extra names and addresses of the embedded etcd's
	// server certificate (besides its listen address and localhost).
	CertSANs []string `json:"certSANs,omitempty"`
	// EtcdTLS is gvs-master's client identity for an external etcd
	// (default: PKIDir's gvs-master certificate, issued by its CA).
	EtcdTLS pki.Files `json:"etcdTLS,omitzero"`
	// Insecure runs without TLS and without etcd authentication: lab use.
	Insecure bool `json:"insecure,omitempty"`
	// CreateProjects creates the projects nodes ask for (default true).
	CreateProjects *bool `json:"createProjects,omitempty"`
	// ConsoleAddr is where the web console listens (HTTPS; "" serves
	// none): console.go, docs/console.md.
	ConsoleAddr string `json:"consoleAddr,omitempty"`
}

func run(args []string) error {
	fs := flag.NewFlagSet("gvs-master", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "configuration file (JSON: clusterNetworks, serviceNetwork, mode, vxlanPort, globalProjects, nodeLeaseTTL, etcdEndpoints, dataDir, clientURL, peerURL, pkiDir, certSANs, etcdTLS, insecure, createProjects, consoleAddr)")
	var nets, globals, endpoints listFlag
	fs.Var(&nets, "cluster-network", "cluster network CIDR:hostSubnetLength, repeatable (default 10.128.0.0/14:9)")
	svc := fs.String("service-network", "", "service network (default 172.30.0.0/16)")
	mode := fs.String("mode", "", "plugin mode: subnet, multitenant or networkpolicy (default multitenant)")
	port := fs.Uint("vxlan-port", 0, "VXLAN UDP port (default 4789)")
	fs.Var(&globals, "global-project", "project that gets VNID 0, repeatable")
	ttl := fs.Int64("node-lease-ttl", 0, "node lease in seconds (default 10)")
	fs.Var(&endpoints, "etcd-endpoints", "external etcd endpoints (comma separated); none runs an embedded etcd")
	dataDir := fs.String("data-dir", "", "data directory: embedded etcd data and pki/ (default /var/lib/gvs-master)")
	clientURL := fs.String("listen-client", "", "embedded etcd client URL (default https://127.0.0.1:2379)")
	peerURL := fs.String("listen-peer", "", "embedded etcd peer URL (default https://127.0.0.1:2380)")
	pkiDir := fs.String("pki-dir", "", "CA and certificates (default DATA-DIR/pki); an operator's own CA goes here as ca.crt (with ca.key to let gvs-master issue)")
	var sans listFlag
	fs.Var(&sans, "cert-san", "extra name or address of the embedded etcd's certificate, repeatable")
	etcdCA := fs.String("etcd-cacert", "", "external etcd: CA file (default PKI-DIR/ca.crt)")
	etcdCert := fs.String("etcd-cert", "", "external etcd: gvs-master's client certificate (default PKI-DIR/gvs-master.crt)")
	etcdKey := fs.String("etcd-key", "", "external etcd: gvs-master's client key (default PKI-DIR/gvs-master.key)")
	insecure := fs.Bool("insecure", false, "no TLS and no etcd authentication: anyone who reaches etcd changes the network (lab use only)")
	createProjects := fs.Bool("create-projects", true, "create the projects nodes ask for (a pod of a new project), each with a fresh VNID")
	consoleAddr := fs.String("console-addr", "", "serve the read-only web console over HTTPS on this address (e.g. :9443); client certificates of the cluster CA, or Kubernetes bearer tokens in the Kubernetes mode (docs/console.md)")
	debug := fs.Bool("debug", false, "log at debug level")
	kf := addKubeFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var fc fileConfig
	if *cfgPath != "" {
		b, err := os.ReadFile(*cfgPath)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fc); err != nil {
			return fmt.Errorf("%s: %w", *cfgPath, err)
		}
	}
	if len(nets) > 0 {
		fc.ClusterNetworks = nil
		for _, s := range nets {
			cn, err := parseNetwork(s)
			if err != nil {
				return err
			}
			fc.ClusterNetworks = append(fc.ClusterNetworks, cn)
		}
	}
	setStr(&fc.ServiceNetwork, *svc, "172.30.0.0/16")
	setStr(&fc.Mode, *mode, "multitenant")
	if *port != 0 {
		fc.VXLANPort = uint16(*port)
	}
	if len(globals) > 0 {
		fc.GlobalProjects = globals
	}
	if *ttl != 0 {
		fc.NodeLeaseTTL = *ttl
	}
	if fc.NodeLeaseTTL == 0 {
		fc.NodeLeaseTTL = 10
	}
	if len(endpoints) > 0 {
		fc.EtcdEndpoints = endpoints
	}
	if *insecure {
		fc.Insecure = true
	}
	scheme := "https"
	if fc.Insecure {
		scheme = "http"
	}
	setStr(&fc.DataDir, *dataDir, "/var/lib/gvs-master")
	setStr(&fc.ClientURL, *clientURL, scheme+"://127.0.0.1:2379")
	setStr(&fc.PeerURL, *peerURL, scheme+"://127.0.0.1:2380")
	setStr(&fc.PKIDir, *pkiDir, filepath.Join(fc.DataDir, "pki"))
	fc.CertSANs = append(fc.CertSANs, sans...)
	setStr(&fc.ConsoleAddr, *consoleAddr, "")
	setStr(&fc.EtcdTLS.CA, *etcdCA, "")
	setStr(&fc.EtcdTLS.Cert, *etcdCert, "")
	setStr(&fc.EtcdTLS.Key, *etcdKey, "")
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "create-projects" })
	if explicit || fc.CreateProjects == nil {
		fc.CreateProjects = createProjects
	}
	if len(fc.ClusterNetworks) == 0 {
		fc.ClusterNetworks = []master.ClusterNetwork{{CIDR: netip.MustParsePrefix("10.128.0.0/14"), HostSubnetLength: 9}}
	}
	if err := validate(fc.Config); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if kf.enabled() {
		// The console beside the master (console.go): either ending
		// ends gvs-master.
		consoleErr, err := startKubeConsole(ctx, log, fc, kf)
		if err != nil {
			return err
		}
		errc := make(chan error, 1)
		go func() { errc <- runKube(ctx, log, fc.Config, kf) }()
		select {
		case err := <-errc:
			return err
		case err := <-consoleErr:
			return err
		}
	}
	if fc.Insecure {
		log.Warn("INSECURE: etcd without TLS and without authentication; anyone who reaches it can read and change the network (lab use only)")
	}
	eps := fc.EtcdEndpoints
	dial := registry.DialConfig{Insecure: fc.Insecure, Logger: log}
	var srvErr <-chan error
	if len(eps) == 0 {
		if err := os.MkdirAll(fc.DataDir, 0o700); err != nil {
			return err
		}
		ec := embedded.Config{Dir: filepath.Join(fc.DataDir, "etcd"), ClientURL: fc.ClientURL, PeerURL: fc.PeerURL}
		if legacyData(fc.DataDir) {
			ec.Dir = fc.DataDir // a data directory from before pki/ existed
		}
		if !fc.Insecure {
			files, err := ensureMasterPKI(fc, log)
			if err != nil {
				return err
			}
			ec.TLS, ec.PeerTLS, dial.TLS = files.server, files.peer, files.master
		}
		srv, err := embedded.Start(ec)
		if err != nil {
			return err
		}
		defer srv.Close()
		srvErr = srv.Err()
		eps = []string{srv.ClientURL}
		log.Info("embedded etcd ready", "client", srv.ClientURL, "dir", ec.Dir)
	} else if !fc.Insecure {
		dial.TLS = fc.EtcdTLS
		if dial.TLS.IsZero() {
			files, err := ensureClientPKI(fc)
			if err != nil {
				return err
			}
			dial.TLS = files
		}
	}
	dial.Endpoints = eps
	if err := writeEndpoints(fc.PKIDir, eps, fc.Insecure); err != nil {
		log.Warn("recording the etcd endpoints for gvs-master cert", "err", err)
	}
	c, err := registry.Dial(dial)
	if err != nil {
		return err
	}
	defer c.Close()
	reg := registry.New(c)
	consoleErr, err := startRegistryConsole(ctx, log, fc, reg, dial.TLS)
	if err != nil {
		return err
	}
	m := &registry.Master{Reg: reg, Config: fc.Config, Log: log,
		SetupAuth: !fc.Insecure, CreateProjects: *fc.CreateProjects}
	log.Info("gvs-master running", "etcd", eps, "networks", fc.ClusterNetworks, "mode", fc.Mode,
		"createProjects", *fc.CreateProjects, "pki", fc.PKIDir)
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx) }()
	select {
	case err := <-errc:
		return err
	case err := <-srvErr:
		return fmt.Errorf("embedded etcd: %w", err)
	case err := <-consoleErr:
		return err
	}
}

func setStr(dst *string, flagVal, def string) {
	if flagVal != "" {
		*dst = flagVal
	}
	if *dst == "" {
		*dst = def
	}
}

func parseNetwork(s string) (master.ClusterNetwork, error) {
	cidr, h, ok := strings.Cut(s, ":")
	if !ok {
		return master.ClusterNetwork{}, fmt.Errorf("cluster network %q: want CIDR:hostSubnetLength", s)
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return master.ClusterNetwork{}, fmt.Errorf("cluster network %q: %w", s, err)
	}
	n, err := strconv.Atoi(h)
	if err != nil {
		return master.ClusterNetwork{}, fmt.Errorf("cluster network %q: %w", s, err)
	}
	return master.ClusterNetwork{CIDR: p, HostSubnetLength: n}, nil
}

func validate(c registry.Config) error {
	if _, err := master.NewSubnetAllocator(c.ClusterNetworks); err != nil {
		return err
	}
	if _, err := netip.ParsePrefix(c.ServiceNetwork); err != nil {
		return fmt.Errorf("service network: %w", err)
	}
	if _, err := sdn.ParseMode(c.Mode); err != nil {
		return err
	}
	if c.NodeLeaseTTL < 1 {
		return errors.New("node lease TTL must be at least 1 second")
	}
	return nil
}
