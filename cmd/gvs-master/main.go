// Command gvs-master is gvs's control plane: it publishes the cluster
// network configuration and allocates node subnets (and creates the default
// and global projects) in an etcd v3 registry. By default it runs an
// embedded single-member etcd with its data on disk; with --etcd-endpoints
// it uses an external etcd cluster instead, with the same key layout.
// Several gvs-master processes may share one registry. With --kubeconfig
// or --in-cluster it follows a Kubernetes API server instead (kube.go).
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
	"strconv"
	"strings"
	"syscall"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/sdn/registry/embedded"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
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
}

func run(args []string) error {
	fs := flag.NewFlagSet("gvs-master", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "configuration file (JSON: clusterNetworks, serviceNetwork, mode, vxlanPort, globalProjects, nodeLeaseTTL, etcdEndpoints, dataDir, clientURL, peerURL)")
	var nets, globals, endpoints listFlag
	fs.Var(&nets, "cluster-network", "cluster network CIDR:hostSubnetLength, repeatable (default 10.128.0.0/14:9)")
	svc := fs.String("service-network", "", "service network (default 172.30.0.0/16)")
	mode := fs.String("mode", "", "plugin mode: subnet, multitenant or networkpolicy (default multitenant)")
	port := fs.Uint("vxlan-port", 0, "VXLAN UDP port (default 4789)")
	fs.Var(&globals, "global-project", "project that gets VNID 0, repeatable")
	ttl := fs.Int64("node-lease-ttl", 0, "node lease in seconds (default 10)")
	fs.Var(&endpoints, "etcd-endpoints", "external etcd endpoints (comma separated); none runs an embedded etcd")
	dataDir := fs.String("data-dir", "", "embedded etcd data directory (default /var/lib/gvs-master)")
	clientURL := fs.String("listen-client", "", "embedded etcd client URL (default http://127.0.0.1:2379)")
	peerURL := fs.String("listen-peer", "", "embedded etcd peer URL (default http://127.0.0.1:2380)")
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
	setStr(&fc.DataDir, *dataDir, "/var/lib/gvs-master")
	setStr(&fc.ClientURL, *clientURL, "http://127.0.0.1:2379")
	setStr(&fc.PeerURL, *peerURL, "http://127.0.0.1:2380")
	if len(fc.ClusterNetworks) == 0 {
		fc.ClusterNetworks = []master.ClusterNetwork{{CIDR: netip.MustParsePrefix("10.128.0.0/14"), HostSubnetLength: 9}}
	}
	if err := validate(fc.Config); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if kf.enabled() {
		return runKube(ctx, log, fc.Config, kf)
	}
	eps := fc.EtcdEndpoints
	var srvErr <-chan error
	if len(eps) == 0 {
		if err := os.MkdirAll(fc.DataDir, 0o700); err != nil {
			return err
		}
		srv, err := embedded.Start(embedded.Config{Dir: fc.DataDir, ClientURL: fc.ClientURL, PeerURL: fc.PeerURL})
		if err != nil {
			return err
		}
		defer srv.Close()
		srvErr = srv.Err()
		eps = []string{srv.ClientURL}
		log.Info("embedded etcd ready", "client", srv.ClientURL, "dir", fc.DataDir)
	}
	c, err := registry.Dial(eps)
	if err != nil {
		return err
	}
	defer c.Close()
	m := &registry.Master{Reg: registry.New(c), Config: fc.Config, Log: log}
	log.Info("gvs-master running", "etcd", eps, "networks", fc.ClusterNetworks, "mode", fc.Mode)
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx) }()
	select {
	case err := <-errc:
		return err
	case err := <-srvErr:
		return fmt.Errorf("embedded etcd: %w", err)
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
