package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/accept"
	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/internal/daemon/etcdsource"
	"github.com/gvswitch/gvs/internal/daemon/pods"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/internal/handoff"
	"github.com/gvswitch/gvs/internal/sched"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/port/busypoll"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/gateway"
	"github.com/gvswitch/gvs/sdn/nat"
	"github.com/gvswitch/gvs/sdn/node"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/tap/uring"
	vswitch "github.com/gvswitch/gvs/vswitch"
	"github.com/gvswitch/gvs/vxlan"
)

// CNIFirstPort is the first switch port given to pods attached by CNI;
// statically configured pods count from sdn.FirstPodPort.
const CNIFirstPort uint32 = 1000

// Daemon is one node's gvs-switchd. Create it with New, then Run it.
type Daemon struct {
	cfg   *Config
	log   *slog.Logger
	table *flowtable.Table
	sw    *vswitch.Switch
	peers *vxlan.Peers
	vx    *vxlan.Port
	// engine is Config.IOEngine resolved on this kernel: IOEngineUring,
	// IOEngineUringAlways or IOEngineTAP.
	engine string
	// slice and sliceAlways are Config.SchedSlice and SchedSliceWhen
	// (slice 0: the threads keep the kernel's); keeper gives it (nil
	// without), sliceErr says why not (both set in Run before the control
	// socket opens).
	slice       time.Duration
	sliceAlways bool
	keeper      *sched.Keeper
	sliceErr    error
	// busy is the readers' busy polling (Config.BusyPoll; nil: off).
	busy *busypoll.Poller
	// rxBudget bounds the pod queues' receive buffers
	// (Config.RxBufferBudgetMiB; nil: no bound).
	rxBudget *port.Budget

	// prog, pods and vnids are made when the node's configuration is
	// complete: in New without a control plane, in Run after the
	// registry's answer with one (init).
	prog  *node.Program
	pods  *pods.Manager
	vnids *vnidWaiter
	// cp is the control plane the node follows (nil without one).
	cp source.ControlPlane

	labels labels           // namespace and pod labels (labels.go)
	egress *egressFirewalls // egress firewalls (egressfw.go)

	cniMetrics cniMetrics // metrics.go
	// regTLS is the node's etcd identity (nil without TLS).
	regTLS atomic.Pointer[pki.Client]

	// Live upgrade (handoff.go): inherit is what the predecessor handed
	// over, until used (nil without one; tookOver stays set); handedOff
	// is set once this daemon handed everything to a successor;
	// listeners are the CNI and control sockets, pausable; tun0 is
	// tun0's queue.
	inherit   *inheritance
	tookOver  bool
	handedOff atomic.Bool
	handingMu sync.Mutex // held while handing over
	// released is set when a successor asked this daemon to stop
	// (handoff fallback); releaseConn is that successor's connection,
	// left open until the process exits. noSave: do not save the
	// connection table on exit.
	released    atomic.Bool
	releaseConn *handoff.Conn
	noSave      bool
	listeners   struct{ cni, control *pausableListener }
	tun0        *tap.Device

	// mu guards the CNI address manager and the subnet history.
	mu     sync.Mutex
	ipam   *cniplugin.IPAM // nil without CNI
	subnet subnetHistory
}

// Pod is an attached pod.
type Pod = pods.Pod

// New builds the daemon's switch; it creates no devices yet. Without a
// control plane the node's configuration is complete and its rule program
// is made too; with one, Run makes it after registering.
func New(cfg *Config, log *slog.Logger) (*Daemon, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{cfg: cfg, log: log, table: flowtable.New(flowtable.Config{Logger: log}), peers: new(vxlan.Peers)}
	// The rule program tracks connections in every mode (services: the
	// replies of requests the host DNATed go back through tun0).
	ct, err := cfg.newTracker()
	if err != nil {
		return nil, err
	}
	trim, err := cfg.trimIdle()
	if err != nil {
		return nil, err
	}
	if d.slice, d.sliceAlways, err = cfg.schedSlice(); err != nil {
		return nil, err
	}
	bc, err := cfg.busyPoll()
	if err != nil {
		return nil, err
	}
	if d.busy, err = busypoll.New(bc); err != nil {
		return nil, err
	}
	if n := cfg.rxBufferBudget(runtime.NumCPU()); n > 0 {
		if d.rxBudget, err = port.NewBudget(n); err != nil {
			return nil, err
		}
	}
	engine, why, err := cfg.ioEngine()
	if err != nil {
		return nil, err
	}
	d.engine = engine
	if why != nil {
		log.Info("pod TAPs use read(2) and write(2) per frame: io_uring is not usable here", "err", why)
	} else {
		log.Info("pod TAPs use the I/O engine " + engine)
	}
	d.sw, err = vswitch.New(vswitch.Config{Table: d.table, Logger: log,
		MaxFrame: d.maxFrame(), NoOffload: !d.offload(), Conntrack: ct, SweepInterval: time.Second, TrimIdle: trim,
		Budget: d.rxBudget})
	if err != nil {
		return nil, err
	}
	d.loadConntrack() // conntrack.go: the connections of the last run
	if d.egress, err = newEgressFirewalls(d); err != nil {
		return nil, err
	}
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
	prog, err := node.New(node.Config{Table: d.table, Node: n, Peers: d.peers, Projects: projects,
		ImplicitDefault: implicitDefault})
	if err != nil {
		return err
	}
	wait, err := d.cfg.vnidWait()
	if err != nil {
		return err
	}
	d.prog = prog
	d.vnids = &vnidWaiter{prog: prog, limit: wait, labelsFirst: d.cfg.FromKubernetes()}
	d.pods = pods.New(pods.Config{Switch: d.sw, Program: prog, VNIDs: d.vnids, Queues: d.podQueues(),
		Offloads: d.podOffloads(), OnTAP: d.usoSeen, FirstPort: sdn.FirstPodPort, Logger: d.log,
		OnChange: d.podsChanged, Engine: d.tapIO})
	return nil
}

// Run sets the node up (rules, vxlan0, tun0, NAT, static pods), serves the
// control socket and /metrics, and blocks until ctx is done. It must run in
// the node's network namespace.
func (d *Daemon) Run(ctx context.Context) (err error) {
	defer d.closeRelease()               // last: a successor may wait for it (handoff.go)
	defer d.closeSwitch()                // the CNI pods' TAPs stay
	ctx, exit := context.WithCancel(ctx) // exit: handed over to a successor
	defer exit()
	d.startSched(ctx)
	if d.cfg.FromRegistry() || d.cfg.FromKubernetes() {
		if err := d.startControlPlane(ctx); err != nil {
			return err
		}
		defer d.cp.Close()
	}
	defer func() {
		if in := d.inherit; in != nil && err != nil {
			err = d.releaseTakeOver(in, err) // fall back: the running daemon stops
		}
	}()
	if err := d.takeOver(); err != nil { // a running daemon's descriptors and state (handoff.go)
		return err
	}
	if err := d.setup(ctx); err != nil {
		return err
	}
	errc := make(chan error, 3)
	if err := d.startCNI(ctx, errc); err != nil {
		return err
	}
	if ka, ok := d.cp.(source.KeepAliver); ok { // after startCNI: a subnet change also marks CNI leases stale
		ka.KeepAlive()
	}
	sock := d.cfg.ControlSocket
	if sock == "" {
		sock = control.DefaultSocket
	}
	var ctlIdx = -1
	if d.inherit != nil {
		ctlIdx = d.inherit.st.ControlListener
	}
	l, err := d.listenLocal(sock, control.Listen, control.Refuse, ctlIdx, &d.listeners.control)
	if err != nil {
		return err
	}
	go func() { errc <- control.Serve(ctx, l, d.handle, d.log) }()
	if err := d.finishTakeOver(); err != nil {
		return err
	}
	go d.serveHandoff(ctx, exit)
	if d.cfg.MetricsAddr != "off" {
		addr := d.cfg.MetricsAddr
		if addr == "" {
			addr = "127.0.0.1:9101"
		}
		go func() { errc <- d.serveMetrics(ctx, addr) }()
	}
	n := d.prog.Node()
	d.log.Info("gvs-switchd ready", "node", n.NodeName, "ip", n.NodeIP, "subnet", n.Subnet,
		"mode", n.Mode, "control", sock)
	select {
	case <-ctx.Done():
		d.waitHandoff() // a handoff in progress ends first (handoff.go)
		return nil
	case err := <-errc:
		d.waitHandoff()
		if d.handedOff.Load() {
			return nil // the listeners closed as they were handed over
		}
		return err
	}
}

// registrySource is the etcd registry as the node follows it: it asks for
// the subnet the configuration names, or else for the one it had before a
// restart.
func (d *Daemon) registrySource() (source.ControlPlane, error) {
	dc := d.cfg.dialConfig(d.log)
	if !dc.TLS.IsZero() {
		tc, err := dc.TLS.NewClient()
		if err != nil {
			return nil, fmt.Errorf("etcdTLS: %w", err)
		}
		dc.Client = tc
		d.regTLS.Store(tc)
	}
	ip, err := netip.ParseAddr(d.cfg.NodeIP)
	if err != nil {
		return nil, fmt.Errorf("nodeIP: %w", err)
	}
	sc := etcdsource.Config{Dial: dc, Node: registry.Node{Name: d.cfg.NodeName, IP: ip},
		Logger: d.log.With("component", "agent")}
	if d.cfg.Subnet != "" {
		if sc.Want, err = netip.ParsePrefix(d.cfg.Subnet); err != nil {
			return nil, fmt.Errorf("subnet: %w", err)
		}
	} else if p, ok := d.rememberedSubnet(); ok {
		sc.Want, sc.Remembered = p, true // ask for it back after a restart past the lease
	}
	return etcdsource.New(sc), nil
}

// podAddresses returns the local pods' addresses by namespace/name, as
// the node publishes them in the registry (networkpolicy peers).
func (d *Daemon) podAddresses() map[string]netip.Addr {
	out := map[string]netip.Addr{}
	if d.pods == nil {
		return out
	}
	for _, p := range d.pods.List() {
		if p.Name != "" && p.Project != "" {
			out[p.Project+"/"+p.Name] = p.IP
		}
	}
	return out
}

// podsChanged is told of every pod attached or detached.
func (d *Daemon) podsChanged() {
	if p, ok := d.cp.(source.PodPublisher); ok {
		p.PodsChanged()
	}
}

func (d *Daemon) setup(ctx context.Context) error {
	if err := d.prog.Setup(); err != nil {
		return err
	}
	n := d.prog.Node()
	// vxlan0, port 1. UDP datagrams are merged toward the pods once a pod
	// TAP shows that the kernel takes UDP super-frames (usoSeen).
	vx, err := vxlan.Listen(vxlan.Config{Local: n.NodeIP, Port: d.cfg.VXLANPort, Peers: d.peers,
		Offload: d.offload(), Readers: d.vxlanReaders(), FlowQueues: d.cfg.VXLANFlowQueues,
		BusyPoll: d.busy, Sockets: d.inheritedVXLAN(), Logger: d.log})
	if err != nil {
		return fmt.Errorf("vxlan0: %w", err)
	}
	var vxq []vswitch.Port
	for _, q := range vx.Queues() {
		vxq = append(vxq, q)
	}
	if err := d.sw.AddPortQueues(sdn.PortVXLAN, vxq); err != nil {
		vx.Close()
		return err
	}
	d.vx = vx
	// tun0, port 2: a TAP left in the node namespace, holding the gateway.
	gw, err := d.inheritedTun0()
	if gw == nil && err == nil {
		gw, err = tap.Create(tap.Config{Name: "tun0", Logger: d.log})
	}
	if err != nil {
		return fmt.Errorf("tun0: %w", err)
	}
	d.tun0 = gw
	gwp := d.tapIO(gw)
	if err := d.sw.AddPort(sdn.PortTun0, gwp); err != nil {
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
	for _, p := range d.cfg.Peers {
		rn, err := p.remote()
		if err == nil {
			err = d.AddRemote(rn)
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
	return d.pods.Add(ctx, pods.Spec{Name: pc.Name, Project: pc.Project, Netns: pc.Netns, IP: ip,
		IfName: pc.IfName, ContainerID: pc.ContainerID, Port: pc.Port}, nil)
}

// Pods lists the attached pods by port.
func (d *Daemon) Pods() []Pod { return d.pods.List() }

// Switch returns the daemon's switch.
func (d *Daemon) Switch() *vswitch.Switch { return d.sw }

// closeSwitch closes the switch when Run returns, leaving the CNI pods'
// TAPs in their namespaces for the next daemon.
func (d *Daemon) closeSwitch() {
	if d.pods != nil {
		d.pods.Exiting()
	}
	d.sw.Close()
	if !d.handedOff.Load() && !d.noSave {
		d.saveConntrack() // for the next daemon (conntrack.go)
	}
}

// nodeConfig returns the node configuration, which a subnet change may
// replace while the daemon runs.
func (d *Daemon) nodeConfig() sdn.NodeConfig { return d.prog.Node() }

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
	ul, err := d.inheritedListener(inherited)
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

// usesUring reports whether the daemon drives pod TAPs through io_uring.
func (d *Daemon) usesUring() bool {
	return d.engine == IOEngineUring || d.engine == IOEngineUringAlways
}

// ringsState is the io_uring rings the TAP queues (pods' and tun0's)
// hold now, for gvsctl show ("" without io_uring).
func (d *Daemon) ringsState() string {
	if !d.usesUring() {
		return ""
	}
	rx, tx := uring.LiveRings()
	return fmt.Sprintf("%d receive (a thread each), %d transmit", rx, tx)
}

// tunnelState is how vxlan0 spreads flows over its receive sockets and
// send ports (vxlan's steer_linux.go), for gvsctl show ("" without it).
func (d *Daemon) tunnelState() string {
	if d.vx == nil {
		return ""
	}
	steered, consecutive := d.vx.Steering()
	n := d.vx.ReceiveSockets()
	s := "1 receive socket"
	if n > 1 {
		s = fmt.Sprintf("%d receive sockets", n)
		if steered {
			s += ", steered by outer source port"
		} else {
			s += ", placed by the kernel's hash (steering refused)"
		}
	}
	ports := d.vx.SourcePorts()
	if consecutive {
		return s + fmt.Sprintf("; send ports %d-%d", ports[0], ports[len(ports)-1])
	}
	return s + fmt.Sprintf("; %d send ports the kernel picked (no free block)", len(ports))
}

// tapIO is how the switch drives a TAP queue: through io_uring
// (uring.Port) when the daemon uses it, else the device itself.
func (d *Daemon) tapIO(dev *tap.Device) vswitch.Port {
	if d.usesUring() {
		p, err := uring.NewPortConfig(dev, uring.PortConfig{Always: d.engine == IOEngineUringAlways, BusyPoll: d.busy, Budget: d.rxBudget})
		if err == nil {
			return p
		}
		d.log.Warn("TAP queue without io_uring", "name", dev.Name(), "err", err)
	}
	dev.SetBudget(d.rxBudget)
	return dev
}

// startSched gives the daemon's threads Config.SchedSlice, while tasks
// wait for the CPUs or always, until ctx ends.
func (d *Daemon) startSched(ctx context.Context) {
	if d.slice == 0 {
		d.sliceErr = errors.New("schedSlice 0")
		return
	}
	k, err := sched.Keep(ctx, sched.Config{Slice: d.slice, Always: d.sliceAlways, Log: d.log})
	if err != nil {
		d.sliceErr = err
		d.log.Info("threads keep the kernel's default time slice", "err", err)
		return
	}
	d.keeper = k
	d.log.Info("threads' scheduler time slice: " + d.sliceState())
}

// sliceState is the threads' scheduler time slice, for gvsctl show.
func (d *Daemon) sliceState() string {
	k := d.keeper
	switch {
	case k == nil && d.sliceErr != nil:
		return "kernel default (" + d.sliceErr.Error() + ")"
	case k == nil:
		return ""
	case d.sliceAlways:
		return d.slice.String() + " always"
	case k.Short():
		return fmt.Sprintf("%v while %s (now: %v; %d changes)", d.slice, k.Follows(), d.slice, k.Switches())
	}
	return fmt.Sprintf("%v while %s (now: kernel default; %d changes)", d.slice, k.Follows(), k.Switches())
}

// busyState is the readers' busy polling, for gvsctl show ("" when off).
func (d *Daemon) busyState() string {
	b := d.busy
	if b == nil {
		return ""
	}
	st := b.Stats()
	found := ""
	if st.Polls > 0 {
		found = fmt.Sprintf(" (%.0f %%)", 100*float64(st.Found)/float64(st.Polls))
	}
	return fmt.Sprintf("up to %v per wait, at most %d polling at once: %d polls, %d found frames%s, %v polling, %d times no poller free",
		b.Max(), b.Pollers(), st.Polls, st.Found, found, st.Time.Round(time.Millisecond), st.Turned)
}

// rxBudgetState is the receive-buffer budget's use, for gvsctl show (""
// without a bound).
func (d *Daemon) rxBudgetState() string {
	b := d.rxBudget
	if b == nil {
		return ""
	}
	return fmt.Sprintf("%.1f of %d MiB in use, %d times a queue could not grow",
		float64(b.InUse())/(1<<20), b.Total()>>20, b.Denied())
}

// ioEngineName is the I/O engine of the daemon's TAPs (Config.IOEngine as
// resolved on this kernel).
func (d *Daemon) ioEngineName() string { return d.engine }
