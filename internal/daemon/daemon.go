package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/gvswitch/gvs/internal/accept"
	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/internal/daemon/pods"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/gateway"
	"github.com/gvswitch/gvs/sdn/nat"
	"github.com/gvswitch/gvs/sdn/node"
	"github.com/gvswitch/gvs/tap"
	vswitch "github.com/gvswitch/gvs/vswitch"
	"github.com/gvswitch/gvs/vxlan"
)

// CNIFirstPort is the first switch port given to pods attached by CNI;
// statically configured pods count from sdn.FirstPodPort.
const CNIFirstPort uint32 = 1000

// Daemon is one node's gvs-switchd. Create it with New, then Run it.
//
// It composes four parts, each owning its state:
//
//   - dp, the dataplane (dataplane.go): the flow table, the switch and its
//     fixed ports, the I/O engine and the tuning (time slice, busy
//     polling, receive-buffer budget), the connection table;
//   - node, the node's state as the control plane drives it (node.go):
//     the rule program, the pods, labels, egress firewalls, the subnet
//     and the CNI leases; it is the source.Sink;
//   - cp, the control plane the node follows (controlplane.go);
//   - up, the live upgrade (upgrade.go, handoff.go).
//
// The Daemon itself wires them: start-up (New, Run), the control socket's
// handlers (handle.go, capture.go), /metrics and the CNI server.
type Daemon struct {
	cfg *Config
	log *slog.Logger

	dp   *dataplane
	node *nodeState
	cp   follower
	up   *liveUpgrade

	cniMetrics cniMetrics // metrics.go
}

// Pod is an attached pod.
type Pod = pods.Pod

// New builds the daemon's switch; it creates no devices yet. Without a
// control plane the node's configuration is complete and its rule program
// is made too; with one, Run makes it after registering.
//
// The daemon keeps a copy of cfg and never writes the caller's: what the
// control plane fills in is the daemon's own state (Config returns it).
func New(cfg *Config, log *slog.Logger) (*Daemon, error) {
	cfg = cfg.clone()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dp, err := newDataplane(cfg, log)
	if err != nil {
		return nil, err
	}
	dp.loadConntrack() // conntrack.go: the connections of the last run
	nd := &nodeState{cfg: cfg, log: log}
	if nd.egress, err = newEgressFirewalls(nd); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: log, dp: dp, node: nd, cp: follower{cfg: cfg, log: log},
		up: &liveUpgrade{cfg: cfg, log: log, dataplane: dp, nodeState: nd}}
	if !cfg.FromRegistry() && !cfg.FromKubernetes() {
		n, err := cfg.Node()
		if err != nil {
			return nil, err
		}
		if err := d.init(n, cfg.Projects, true); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// init makes the rule program, the VNID waiter and the pod manager for the
// node's configuration.
func (d *Daemon) init(n sdn.NodeConfig, projects map[string]uint32, implicitDefault bool) error {
	if n.Mode.Canonical() == sdn.ModeNetworkPolicy && !d.cfg.FromKubernetes() && !d.cfg.FromRegistry() {
		// Policies come from the API server or the etcd registry; a
		// static configuration has none, and running without them would
		// ignore every NetworkPolicy: fail closed.
		return fmt.Errorf("%w: networkpolicy mode needs a source of policies: the etcd registry (etcd) or Kubernetes (kubeconfig)", sdn.ErrUnsupportedMode)
	}
	dp := d.dp
	prog, err := node.New(node.Config{Table: dp.table, Node: n, Peers: dp.peers, Projects: projects,
		ImplicitDefault: implicitDefault})
	if err != nil {
		return err
	}
	wait, err := d.cfg.vnidWait()
	if err != nil {
		return err
	}
	nd := d.node
	nd.prog = prog
	nd.vnids = &vnidWaiter{prog: prog, limit: wait, labelsFirst: d.cfg.FromKubernetes()}
	nd.pods = pods.New(pods.Config{Switch: dp.sw, Program: prog, VNIDs: nd.vnids, Queues: dp.podQueues(),
		Offloads: dp.podOffloads(), OnTAP: dp.usoSeen, FirstPort: sdn.FirstPodPort, Logger: d.log,
		OnChange: d.cp.podsChanged, Engine: dp.tapIO})
	dp.podNames.setList(nd.pods.List)
	return nil
}

// Run sets the node up (rules, vxlan0, tun0, NAT, static pods), serves the
// control socket and /metrics, and blocks until ctx is done. It must run in
// the node's network namespace.
func (d *Daemon) Run(ctx context.Context) (err error) {
	defer d.up.closeRelease()            // last: a successor may wait for it (handoff.go)
	defer d.closeSwitch()                // the CNI pods' TAPs stay
	ctx, exit := context.WithCancel(ctx) // exit: handed over to a successor
	defer exit()
	d.dp.startSched(ctx)
	if d.cfg.FromRegistry() || d.cfg.FromKubernetes() {
		if err := d.startControlPlane(ctx); err != nil {
			return err
		}
		defer d.cp.src.Close()
	}
	defer func() {
		if in := d.up.inherit; in != nil && err != nil {
			err = d.up.releaseTakeOver(in, err) // fall back: the running daemon stops
		}
	}()
	d.waitRemotes(ctx)                      // the other nodes' rules first (handoff.go)
	if err := d.up.takeOver(); err != nil { // a running daemon's descriptors and state (handoff.go)
		return err
	}
	if err := d.setup(ctx); err != nil {
		return err
	}
	if d.dp.exporter != nil {
		go d.dp.runExporter(ctx, d.dp.sw.Conntrack()) // ipfix.go
	}
	defer func() {
		if !d.up.handedOff.Load() {
			d.node.releaseEgressHost() // a successor keeps them (egressip.go)
		}
	}()
	errc := make(chan error, 3)
	if err := d.startCNI(ctx, errc); err != nil {
		return err
	}
	if ka, ok := d.cp.src.(source.KeepAliver); ok { // after startCNI: a subnet change also marks CNI leases stale
		ka.KeepAlive()
	}
	sock := d.cfg.ControlSocket
	if sock == "" {
		sock = control.DefaultSocket
	}
	var ctlIdx = -1
	if d.up.inherit != nil {
		ctlIdx = d.up.inherit.st.ControlListener
	}
	l, err := d.listenLocal(sock, control.Listen, control.Refuse, ctlIdx, &d.up.listeners.control)
	if err != nil {
		return err
	}
	go func() { errc <- control.Serve(ctx, l, d.handle, d.log) }()
	if err := d.up.finishTakeOver(); err != nil {
		return err
	}
	go d.up.serveHandoff(ctx, exit)
	if d.cfg.MetricsAddr != "off" {
		addr := d.cfg.MetricsAddr
		if addr == "" {
			addr = "127.0.0.1:9101"
		}
		go func() { errc <- d.serveMetrics(ctx, addr) }()
	}
	if addr := d.cfg.traceAddr(); addr != "" {
		go serveTrace(ctx, addr, d.cfg.traceTLS(), d.handle, d.log)
	}
	n := d.node.prog.Node()
	d.log.Info("gvs-switchd ready", "node", n.NodeName, "ip", n.NodeIP, "subnet", n.Subnet,
		"mode", n.Mode, "control", sock)
	select {
	case <-ctx.Done():
		d.up.waitHandoff() // a handoff in progress ends first (handoff.go)
		return nil
	case err := <-errc:
		d.up.waitHandoff()
		if d.up.handedOff.Load() {
			return nil // the listeners closed as they were handed over
		}
		return err
	}
}

func (d *Daemon) setup(ctx context.Context) error {
	if err := d.node.prog.Setup(); err != nil {
		return err
	}
	n := d.node.prog.Node()
	// vxlan0, port 1. UDP datagrams are merged toward the pods once a pod
	// TAP shows that the kernel takes UDP super-frames (usoSeen).
	vx, err := vxlan.Listen(vxlan.Config{Local: n.NodeIP, Port: d.cp.config().VXLANPort, Peers: d.dp.peers,
		Offload: d.dp.offload(), Readers: d.dp.vxlanReaders(), FlowQueues: d.cfg.VXLANFlowQueues,
		BusyPoll: d.dp.busy, Sockets: d.up.inheritedVXLAN(), Logger: d.log})
	if err != nil {
		return fmt.Errorf("vxlan0: %w", err)
	}
	var vxq []vswitch.Port
	for _, q := range vx.Queues() {
		vxq = append(vxq, q)
	}
	if err := d.dp.sw.AddPortQueues(sdn.PortVXLAN, vxq); err != nil {
		vx.Close()
		return err
	}
	d.dp.vx = vx
	// tun0, port 2: a TAP left in the node namespace, holding the gateway.
	gw, err := d.up.inheritedTun0()
	if gw == nil && err == nil {
		gw, err = tap.Create(tap.Config{Name: "tun0", Logger: d.log})
	}
	if err != nil {
		return fmt.Errorf("tun0: %w", err)
	}
	d.dp.tun0 = gw
	gwp := d.dp.tapIO(gw)
	if err := d.dp.sw.AddPort(sdn.PortTun0, gwp); err != nil {
		gwp.Close()
		return err
	}
	if err := gateway.Configure("tun0", n); err != nil {
		return fmt.Errorf("tun0: %w", err)
	}
	if d.cfg.NAT == nil || *d.cfg.NAT {
		if err := nat.EnsureMasquerade(n.ClusterNetworks); err != nil {
			return fmt.Errorf("NAT egress: %w", err)
		}
	}
	if err := d.node.startEgressHost(); err != nil {
		d.log.Error("egress IPs: the host side is not installed; their traffic is dropped until it is", "err", err)
	}
	for _, p := range d.cfg.Peers {
		rn, err := p.remote()
		if err == nil {
			err = d.node.AddRemote(rn)
		}
		if err != nil {
			return err
		}
	}
	for _, pc := range d.cfg.Pods {
		if _, err := d.AddPod(ctx, pc); err != nil {
			return fmt.Errorf("pod %s: %w", pc.Name, err)
		}
	}
	return nil
}

// AddPod attaches a statically configured pod (pods.Manager.Add).
func (d *Daemon) AddPod(ctx context.Context, pc PodConfig) (Pod, error) {
	ip, err := netip.ParseAddr(pc.IP)
	if err != nil {
		return Pod{}, fmt.Errorf("ip: %w", err)
	}
	return d.node.pods.Add(ctx, pods.Spec{Name: pc.Name, Project: pc.Project, Netns: pc.Netns, IP: ip,
		IfName: pc.IfName, ContainerID: pc.ContainerID, Port: pc.Port}, nil)
}

// Config returns a copy of the configuration the node runs with: New's,
// and once the control plane answered, with what it filled in
// (clusterNetworks, serviceNetwork, mode, vxlanPort) and the subnet it
// gave the node last ("" while the node has none). A daemon started in
// this one's place takes it, as gvs-switchd does when a live upgrade falls
// back (ErrHandoffFallback), so that it asks for the same subnet.
func (d *Daemon) Config() *Config {
	c := d.cp.config().clone()
	if d.cp.filled.Load() != nil {
		c.Subnet = ""
		if sub := d.node.currentSubnet(); sub.IsValid() {
			c.Subnet = sub.String()
		}
	}
	return c
}

// Pods lists the attached pods by port.
func (d *Daemon) Pods() []Pod { return d.node.pods.List() }

// Switch returns the daemon's switch.
func (d *Daemon) Switch() *vswitch.Switch { return d.dp.sw }

// closeSwitch closes the switch when Run returns, leaving the CNI pods'
// TAPs in their namespaces for the next daemon.
func (d *Daemon) closeSwitch() {
	if d.node.pods != nil {
		d.node.pods.Exiting()
	}
	d.dp.sw.Close()
	if !d.up.handedOff.Load() && !d.up.noSave {
		d.dp.saveConntrack() // for the next daemon (conntrack.go)
	}
}

// listenLocal opens a local socket with listen and lets only the processes
// Config.SocketGroup allows use it (root and, if set, the group's members,
// by SO_PEERCRED); refuse answers the others in the socket's protocol.
//
// The listener can be paused and handed to a successor (handoff.go): it is
// stored in *slot. inherited is the index of the predecessor's listening
// socket to take instead of listening anew (-1: none).
func (d *Daemon) listenLocal(path string, listen func(string) (net.Listener, error), refuse func(net.Conn, error),
	inherited int, slot **pausableListener) (net.Listener, error) {
	p, err := d.cfg.socketPolicy()
	if err != nil {
		return nil, err
	}
	ul, err := d.up.inheritedListener(inherited)
	if err != nil {
		return nil, fmt.Errorf("%s: inherited: %w", path, err)
	}
	if ul == nil {
		nl, err := listen(path)
		if err != nil {
			return nil, err
		}
		if ul, _ = nl.(*net.UnixListener); ul == nil {
			nl.Close()
			return nil, fmt.Errorf("%s: listener is a %T", path, nl)
		}
	}
	// Closing does not remove the path: after a live upgrade the
	// successor serves the same socket there (handoff.go); a stale file
	// is replaced on the next start.
	ul.SetUnlinkOnClose(false)
	if err := accept.SocketMode(path, p); err != nil {
		ul.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pl := &pausableListener{ul: ul, guarded: accept.Guard(ul, p, func(c net.Conn, err error) {
		d.log.Warn("local socket: connection refused", "socket", path, "err", err)
		refuse(c, err)
	})}
	*slot = pl
	return pl, nil
}
