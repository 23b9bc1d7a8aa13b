// Package netns is the demo on network-namespace nodes (make demo, MODE
// etcd, kube or netpol): two gvs nodes with three pods each, in projects
// default (VNID 0), alpha and beta, on a veth underlay (lab/cluster), and
// what gvs does for them tried for real.
//
// The way through Up:
//  1. remove what an earlier demo on the prefix left (Down);
//  2. bring up the nodes, the control plane (gvs-master with its embedded
//     etcd, or a Kubernetes API server and gvs-master in Kubernetes mode)
//     and the pods, attached by CNI ADD; print the nodes and projects;
//  3. ping every pod from every other and compare with the isolation rule;
//  4. the control plane refuses a tenant: the registry a pod without
//     credentials (etcd), or a netid change made with a node's token (kube);
//  5. NAT egress to the external host, which sees the node's address;
//  6. TCP throughput between pods on the two nodes;
//  7. NetworkPolicy changing the matrix (netpol mode);
//  8. a Service of alpha: reached from alpha, refused to beta;
//  9. an egress firewall in alpha (kube modes);
//  10. an egress IP: alpha's pod on n1 leaves from the address alpha was
//     given, hosted by n2; beta's from n1's; then removed again;
//  11. multicast per project: an alpha pod's datagrams to a group reach the
//     alpha pod on the other node once alpha is opted in (gvsctl projects
//     enable-multicast), never a pod of another project; then off again
//     (etcd and kube modes);
//  12. isolation changed live with gvsctl projects join and isolate (not in
//     netpol mode, which refuses renumbering projects, as OpenShift);
//  13. print the commands to look around and how to tear it down.
//
// Up returns what it observed (Result) and leaves the cluster running; its
// processes are recorded in the lab's state directory, so they outlive the
// command, and Down stops exactly those and removes the namespaces. Every
// namespace and address is the demo's own; nothing touches the host's.
package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gvswitch/gvs/bench/traffic"
	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// Prefix is the default lab prefix of the namespace demo (the cluster demo,
// internal/demo/cluster, uses its own).
const Prefix = "gvs-demo"

// Underlay is the demo's underlay network. It exists only inside the demo's
// namespaces.
var Underlay = netip.MustParsePrefix("192.168.240.0/24")

// The control planes the demo runs with (Config.Mode).
const (
	// ModeEtcd is gvs-master with its embedded etcd (the default).
	ModeEtcd = "etcd"
	// ModeKube is a Kubernetes API server and gvs-master in Kubernetes mode.
	ModeKube = "kube"
	// ModeNetpol is ModeKube in networkpolicy mode.
	ModeNetpol = "netpol"
)

// Modes lists the valid Config.Mode values.
var Modes = []string{ModeEtcd, ModeKube, ModeNetpol}

// ErrChecks is returned (wrapped) by Up when the cluster came up but what it
// observed differs from what gvs promises; Result.Problems says how.
var ErrChecks = errors.New("the demo's checks failed")

// Config says how to run the demo. The zero value runs ModeEtcd on Prefix,
// prints nowhere and finds the binaries beside the running program.
type Config struct {
	// Prefix is the lab prefix (default Prefix).
	Prefix string
	// Mode is ModeEtcd, ModeKube or ModeNetpol ("": ModeEtcd).
	Mode string
	// Out receives the demo's report (default io.Discard).
	Out io.Writer
	// BinDir holds gvs-switchd, gvs-master, gvs-cni, gvsctl and gvs-bench
	// (default: the running program's directory). The kube modes find the
	// Kubernetes programs with kubetest.BinDir ($GVS_KUBE_BIN).
	BinDir string
	// ThroughputTime is how long the throughput step sends (default 5 s).
	ThroughputTime time.Duration
}

// Validate checks the mode and the prefix.
func (c Config) Validate() error {
	switch c.Mode {
	case "", ModeEtcd, ModeKube, ModeNetpol:
	default:
		return fmt.Errorf("demo: -mode %q: %s", c.Mode, strings.Join(Modes, ", "))
	}
	if c.Prefix != "" {
		if err := (lab.Spec{Prefix: c.Prefix}).Validate(); err != nil {
			return fmt.Errorf("demo: -prefix %q: %w", c.Prefix, err)
		}
	}
	return nil
}

func (c *Config) defaults() error {
	if c.Prefix == "" {
		c.Prefix = Prefix
	}
	if c.Mode == "" {
		c.Mode = ModeEtcd
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.ThroughputTime <= 0 {
		c.ThroughputTime = 5 * time.Second
	}
	if c.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		c.BinDir = filepath.Dir(exe)
	}
	return nil
}

// Result is what the demo observed. A step the mode does not run leaves its
// fields zero.
type Result struct {
	// Reachability is every pod pinged from every other, beside what the
	// isolation rule says (in netpol mode: before any policy, all reach all).
	Reachability cluster.Matrix
	// ControlPlaneRefused: the registry gave a tenant pod without
	// credentials no answer (etcd mode), or the API server refused a netid
	// change made with a node's token (kube modes).
	ControlPlaneRefused bool
	// Egress is the transfer from a pod to the external host through NAT
	// egress; Egress.SeenAs is the source address the host saw, EgressNode
	// the node address it should be.
	Egress     traffic.Result
	EgressNode netip.Addr
	// Throughput is the TCP transfer between pods of one project on the two
	// nodes.
	Throughput traffic.Result
	// Service is the Service step.
	Service ServiceResult
	// Policy is the matrix after alpha's NetworkPolicies, with Want set from
	// the policies (netpol mode).
	Policy cluster.Matrix
	// EgressFirewall is the egress firewall step (kube modes).
	EgressFirewall EgressFirewallResult
	// EgressIP is the egress IP step.
	EgressIP EgressIPResult
	// Multicast is the multicast step (etcd and kube modes).
	Multicast MulticastResult
	// Isolation is the live isolation step (etcd and kube modes).
	Isolation IsolationResult
	// Problems lists where what the demo saw differs from what gvs promises;
	// empty when every check passed.
	Problems []string
}

// ServiceResult is what the Service step saw: the Service alpha/web at
// ClusterIP:80, its backend an alpha pod on the second node.
type ServiceResult struct {
	ClusterIP netip.Addr
	// Own is the transfer from an alpha pod; OwnReached whether it arrived
	// intact.
	Own        traffic.Result
	OwnReached bool
	// OtherRefused: a beta pod's connection failed.
	OtherRefused bool
}

// EgressFirewallResult is what the egress firewall step saw.
type EgressFirewallResult struct {
	// AlphaBlocked: alpha's pod no longer reached the external host once the
	// EgressNetworkPolicy denied it; BetaReached: beta's still did.
	AlphaBlocked, BetaReached bool
}

// IsolationResult is what the live isolation step saw between an alpha pod
// and a beta pod on the other node.
type IsolationResult struct {
	// BlockedBefore: alpha did not reach beta before the join.
	BlockedBefore bool
	// Joined: alpha reached beta after `projects join alpha beta`, JoinTook
	// after how long.
	Joined   bool
	JoinTook time.Duration
	// Isolated: alpha was blocked again after `projects isolate beta`,
	// IsolateTook after how long.
	Isolated    bool
	IsolateTook time.Duration
}

// run is one demo in progress.
type run struct {
	cfg Config
	c   *cluster.Cluster
	res Result
}

func (r *run) step(s string) { fmt.Fprintf(r.cfg.Out, "==> %s\n", s) }

func (r *run) printf(format string, args ...any) { fmt.Fprintf(r.cfg.Out, format, args...) }

func (r *run) fail(s string) { r.res.Problems = append(r.res.Problems, s) }

// bench returns the path of gvs-bench, whose traffic tools run in the pods.
func (r *run) bench() string { return filepath.Join(r.cfg.BinDir, "gvs-bench") }

// Up runs the demo (see the package overview) and leaves the cluster
// running. It returns what it observed; if a check failed, the error wraps
// ErrChecks and Result.Problems lists the failures. An error before the
// cluster is up leaves nothing behind; one after leaves the cluster for
// Down.
func Up(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	kube, netpol := cfg.Mode == ModeKube || cfg.Mode == ModeNetpol, cfg.Mode == ModeNetpol
	if os.Geteuid() != 0 {
		return Result{}, errors.New("the demo creates network namespaces: run it as root")
	}
	_ = Down(cfg.Prefix) // a previous demo that was not taken down
	r := &run{cfg: cfg}
	spec := cluster.Spec{
		Lab: lab.Spec{Prefix: cfg.Prefix, Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"},
			Underlay: Underlay, External: true},
		Mode:   "multitenant",
		VNIDs:  map[string]uint32{"default": 0, "alpha": 10, "beta": 11},
		BinDir: cfg.BinDir,
		// gvs-master (embedded etcd) in n1's namespace allocates subnets
		// and VNIDs; the nodes register and follow it.
		ControlPlane: cluster.ControlPlaneEmbedded,
		// Pods are attached by real CNI ADD calls (libcni → gvs-cni →
		// gvs-switchd); each TAP is created in its pod's namespace.
		CNI: true,
	}
	plane := "gvs-master with its embedded etcd"
	spec.MasterArgs = consoleArgs(cfg, kube) // the web console (console.go)
	if kube {
		// A Kubernetes API server in n1's namespace (on Debian's etcd);
		// gvs-master in Kubernetes mode gives Namespaces their
		// NetNamespaces and Nodes their HostSubnets; the nodes follow
		// the API server as the gvs-node ServiceAccount and install
		// their CNI plugin as the DaemonSet does.
		spec.ControlPlane, spec.VNIDs = cluster.ControlPlaneKube, nil
		spec.Configure = consoleNodeCerts(cfg) // the nodes' trace endpoints (console.go)
		plane = "a Kubernetes API server and gvs-master in Kubernetes mode"
		if netpol {
			spec.Mode = "networkpolicy"
			plane += ", networkpolicy mode"
		}
	}
	r.step("creating 2 nodes with 3 pods each (projects default, alpha, beta) in network namespaces " + cfg.Prefix + "-*,\n    control plane: " + plane + ",\n    pods attached by CNI ADD (libcni → gvs-cni → gvs-switchd)")
	c, err := cluster.Up(ctx, spec)
	if err != nil {
		return r.res, err
	}
	r.c = c
	if err := r.show(ctx, kube); err != nil {
		return r.res, err
	}

	if netpol {
		r.step("reachability (networkpolicy mode, no policy yet: every pod reaches every other)")
	} else {
		r.step("reachability (multitenant: a pod reaches another iff same VNID or either VNID is 0)")
	}
	m := c.Reachability(ctx)
	m.Print(cfg.Out)
	r.res.Reachability = m
	r.res.Problems = append(r.res.Problems, m.Mismatches()...)

	if kube {
		r.kubeRBAC(ctx)
	} else {
		r.registryRefused(ctx)
	}
	if err := r.egress(ctx); err != nil {
		return r.res, err
	}
	a, b := c.Nodes[0].Pods[1], c.Nodes[1].Pods[1]
	if err := r.throughput(ctx, a, b); err != nil {
		return r.res, err
	}
	if netpol {
		r.networkPolicy(ctx)
	}
	r.services(ctx)
	if kube {
		r.egressFirewall(ctx)
	}
	r.egressIP(ctx)
	if !netpol {
		// netpol mode is about NetworkPolicy; multicast in that mode
		// (ingress policies do not apply to it, as in OpenShift SDN)
		// is internal/e2e/multicast_test.go's.
		r.multicast(ctx)
		// networkpolicy mode refuses renumbering projects, as OpenShift
		r.liveIsolation(ctx)
	}
	r.console(ctx, kube)
	r.lookAround(kube, a, b)
	if len(r.res.Problems) > 0 {
		r.printf("\nDEMO FAILED:\n")
		for _, s := range r.res.Problems {
			r.printf("  - %s\n", s)
		}
		return r.res, fmt.Errorf("demo: %w", ErrChecks)
	}
	r.printf("\ndemo: all checks passed\n")
	return r.res, nil
}

// Down removes the demo on prefix: the processes recorded in its state
// directory (by PID, after checking their start time) and its namespaces.
// It is idempotent.
func Down(prefix string) error { return lab.DestroyPrefix(prefix) }

// show prints the nodes and projects (kube modes) and each node's gvsctl
// show.
func (r *run) show(ctx context.Context, kube bool) error {
	if kube {
		for _, args := range [][]string{{"nodes"}, {"projects", "list"}} {
			r.step("gvsctl --kubeconfig admin.kubeconfig " + strings.Join(args, " "))
			out, err := r.c.KubeCtl(ctx, args...)
			if err != nil {
				return err
			}
			r.printf("%s", indent(string(out)))
		}
	}
	for i, n := range r.c.Nodes {
		out, err := r.c.Ctl(ctx, i, "show")
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		r.printf("%s", indent(string(out)))
	}
	return nil
}

// egress sends TCP from a pod to the external host through NAT egress and
// checks that the host saw the node's address.
func (r *run) egress(ctx context.Context) error {
	c := r.c
	ext := c.Lab.External
	src := c.Nodes[0].Pods[1]
	r.res.EgressNode = c.Nodes[0].IP
	r.step(fmt.Sprintf("NAT egress: %s (%s) → external host %s through tun0", src.Name, src.IP, ext.IP))
	srv, err := r.startServer(ctx, ext.NS, "ext-tcp.log", 5201)
	if err != nil {
		return err
	}
	defer srv.Stop()
	out, err := c.Lab.Exec(ctx, src.NS, r.bench(), "tcp-client", "-c", ext.IP.String()+":5201", "-bytes", "1000000")
	r.printf("%s", indent(string(out)))
	if err != nil {
		r.fail("NAT egress failed: " + err.Error())
		return nil
	}
	t, err := ParseTransfer(out)
	if err != nil {
		r.fail("NAT egress: " + err.Error())
		return nil
	}
	r.res.Egress = t
	if !seenFrom(t.SeenAs, c.Nodes[0].IP) {
		r.fail(fmt.Sprintf("the external host did not see the node address %s as the source", c.Nodes[0].IP))
	} else {
		r.printf("    the external host sees the node's address %s, not the pod's %s\n", c.Nodes[0].IP, src.IP)
	}
	return nil
}

// throughput measures TCP from a to b for five seconds.
func (r *run) throughput(ctx context.Context, a, b cluster.Pod) error {
	c := r.c
	r.step(fmt.Sprintf("TCP throughput across nodes: %s → %s (project %s, VXLAN VNI %d)", a.Name, b.Name, a.Project, a.VNID))
	srv, err := r.startServer(ctx, b.NS, "pod-tcp.log", 5201)
	if err != nil {
		return err
	}
	defer srv.Stop()
	out, err := c.Lab.Exec(ctx, a.NS, r.bench(), "tcp-client", "-c", b.IP.String()+":5201", "-t", r.cfg.ThroughputTime.String())
	r.printf("%s", indent(string(out)))
	if err != nil {
		r.fail("TCP throughput run failed: " + err.Error())
		return nil
	}
	t, err := ParseTransfer(out)
	if err != nil {
		r.fail("TCP throughput: " + err.Error())
		return nil
	}
	r.res.Throughput = t
	return nil
}

// lookAround prints the commands to look at the running cluster.
func (r *run) lookAround(kube bool, a, b cluster.Pod) {
	c := r.c
	gvsctl := filepath.Join(r.cfg.BinDir, "gvsctl")
	ctlPlane := fmt.Sprintf("-etcd %s -etcd-cacert %s -etcd-cert %s -etcd-key %s", strings.Join(c.EtcdEndpoints, ","),
		c.AdminTLS().CA, c.AdminTLS().Cert, c.AdminTLS().Key)
	services := fmt.Sprintf("ip netns exec %s %s %s services list", c.Nodes[0].NS, gvsctl, ctlPlane)
	creds := fmt.Sprintf("the administrator's certificate gvs-master made on first start is in %s", c.PKIDir())
	if kube {
		ctlPlane = "--kubeconfig " + c.KubeAdmin
		services = "(Services are the API server's: kube-proxy programs them, gvs-switchd follows them)"
		creds = ctlPlane + " is an admin kubeconfig for the API server; gvs-master's log is " + filepath.Join(c.Lab.StateDir(), "master.log")
	}
	r.printf(`
The cluster keeps running. Look around:
  ip netns exec %[1]s %[2]s -s %[3]s dump-ports
  ip netns exec %[1]s %[2]s -s %[3]s dump-flows table=80
  ip netns exec %[1]s %[2]s -s %[3]s trace in_port=%[8]d,ip,nw_src=%[4]s,nw_dst=%[5]s
  ip netns exec %[6]s ping %[5]s
  ip netns exec %[1]s %[2]s %[7]s projects list    (and join, isolate, make-global)
  ip netns exec %[1]s %[2]s %[7]s nodes
  %[10]s
(%[9]s)

%[12]s

Tear it down with:  %[11]s
`, c.Nodes[0].NS, gvsctl, c.Nodes[0].Socket, a.IP, b.IP, a.NS, ctlPlane,
		daemon.CNIFirstPort+1, // a is the second pod CNI attached on n1
		creds, services, teardown(r.cfg), r.consoleHelp(kube))
}

// teardown returns the command that removes the demo cfg describes: make
// demo-down for the default prefix, which it removes.
func teardown(cfg Config) string {
	if cfg.Prefix == Prefix {
		return "make demo-down"
	}
	return filepath.Join(cfg.BinDir, "gvs-demo") + " down -prefix " + cfg.Prefix
}

// registryRefused shows a tenant pod refused by the registry.
func (r *run) registryRefused(ctx context.Context) {
	c := r.c
	tenant := c.Nodes[0].Pods[2]
	registry := netip.AddrPortFrom(c.Nodes[0].IP, 2379).String()
	r.step(fmt.Sprintf("control plane: tenant pod %s (project %s) tries the registry at %s without credentials", tenant.Name, tenant.Project, registry))
	out, err := c.Lab.Exec(ctx, tenant.NS, r.bench(), "registry-probe", "-c", registry)
	r.printf("%s", indent(string(out)))
	if err != nil {
		r.fail("a tenant pod got an answer from the registry: " + err.Error())
		return
	}
	r.res.ControlPlaneRefused = true
	r.printf("    refused: etcd speaks only TLS with a client certificate from the cluster CA, and a node's certificate writes only its own record\n")
}

// startServer starts gvs-bench tcp-server on port in namespace ns, logging
// to name in the lab's state directory, and waits until it listens.
func (r *run) startServer(ctx context.Context, ns, name string, port int) (*lab.Proc, error) {
	log := filepath.Join(r.c.Lab.StateDir(), name)
	srv, err := r.c.Lab.Start(ctx, ns, log, r.bench(), "tcp-server", "-l", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, err
	}
	listening := func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "listening on")
	}
	if !eventually(ctx, 10*time.Second, 20*time.Millisecond, listening) {
		_ = srv.Stop()
		b, _ := os.ReadFile(log)
		return nil, fmt.Errorf("demo: tcp-server in %s did not listen within 10s:\n%s", ns, b)
	}
	return srv, nil
}

// eventually reports whether cond holds within timeout, checking it at once
// and then after every pause; it gives up early when ctx ends.
func eventually(ctx context.Context, timeout, pause time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
		}
	}
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n") + "\n"
}
