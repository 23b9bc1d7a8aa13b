package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/accept"
	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/gateway"
	"github.com/gvswitch/gvs/sdn/nat"
	"github.com/gvswitch/gvs/sdn/pki"
	vswitch "github.com/gvswitch/gvs/switch"
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/vxlan"
)

// Daemon is one node's gvs-switchd: the switch, its ports and the node's
// rule program. Create it with New, then Run it.
type Daemon struct {
	cfg   *Config
	node  sdn.NodeConfig
	log   *slog.Logger
	table *flowtable.Table
	sw    *vswitch.Switch
	peers *vxlan.Peers
	vx    *vxlan.Port

	cniMetrics cniMetrics // metrics.go

	// exiting is set when Run returns: the switch's closing the CNI pods'
	// TAPs then leaves them in place (restart.go).
	exiting atomic.Bool

	// projects is the project → VNID map pods are attached with.
	projects *projects
	// regTLS is the node's etcd identity (nil without TLS).
	regTLS atomic.Pointer[pki.Client]

	mu       sync.Mutex
	pods     map[string]*Pod // by name
	nextPort uint32
	vnids    map[uint32]int // VNID → local pods using it
	remotes  map[netip.Addr]sdn.RemoteNode
	// ipam is the CNI address manager (nil without CNI); subnet is the
	// history of the node's subnet changes (agent_subnet.go).
	ipam   *cniplugin.IPAM
	subnet subnetHistory
}

// Pod is an attached pod.
type Pod struct {
	Name    string     `json:"name"`
	Project string     `json:"project"`
	Netns   string     `json:"netns"`
	IP      netip.Addr `json:"ip"`
	MAC     string     `json:"mac"`
	Port    uint32     `json:"port"`
	VNID    uint32     `json:"vnid"`
	// ContainerID and IfName identify a pod attached by CNI.
	ContainerID string `json:"containerID,omitempty"`
	IfName      string `json:"ifName,omitempty"`

	dev *tap.Device // the pod's TAP (the switch owns it)
}

// New builds the daemon's switch and rule program; it creates no devices yet.
func New(cfg *Config, log *slog.Logger) (*Daemon, error) {
	var node sdn.NodeConfig
	var err error
	if !cfg.FromRegistry() { // otherwise Run completes it from the registry
		if node, err = cfg.Node(); err != nil {
			return nil, err
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{
		cfg:      cfg,
		node:     node,
		log:      log,
		table:    flowtable.New(flowtable.Config{Logger: log}),
		peers:    new(vxlan.Peers),
		pods:     map[string]*Pod{},
		nextPort: sdn.FirstPodPort,
		vnids:    map[uint32]int{},
		remotes:  map[netip.Addr]sdn.RemoteNode{},
		projects: newProjects(cfg.Projects, !cfg.FromRegistry()),
	}
	d.sw, err = vswitch.New(vswitch.Config{Table: d.table, Logger: log,
		MaxFrame: d.maxFrame(), NoOffload: !d.offload()})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Run sets the node up (rules, vxlan0, tun0, NAT, static pods), serves the
// control socket and /metrics, and blocks until ctx is done. It must run in
// the node's network namespace.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.closeSwitch() // restart.go: the CNI pods' TAPs stay
	var ag *agent
	if d.cfg.FromRegistry() {
		var err error
		if ag, err = d.startAgent(ctx); err != nil {
			return err
		}
		defer ag.close()
	}
	if err := d.setup(ctx); err != nil {
		return err
	}
	errc := make(chan error, 3)
	if err := d.startCNI(ctx, errc); err != nil {
		return err
	}
	if ag != nil { // after startCNI: a subnet change also marks CNI leases stale
		ag.run(ctx)
	}
	sock := d.cfg.ControlSocket
	if sock == "" {
		sock = control.DefaultSocket
	}
	l, err := d.listenLocal(sock, control.Listen, control.Refuse)
	if err != nil {
		return err
	}
	go func() { errc <- control.Serve(ctx, l, d.handle, d.log) }()
	if d.cfg.MetricsAddr != "off" {
		addr := d.cfg.MetricsAddr
		if addr == "" {
			addr = "127.0.0.1:9101"
		}
		go func() { errc <- d.serveMetrics(ctx, addr) }()
	}
	node := d.nodeConfig()
	d.log.Info("gvs-switchd ready", "node", node.NodeName, "ip", node.NodeIP, "subnet", node.Subnet,
		"mode", node.Mode, "control", sock)
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

func (d *Daemon) setup(ctx context.Context) error {
	setup, err := sdn.SetupRules(d.node)
	if err != nil {
		return fmt.Errorf("setup rules: %w", err)
	}
	if err := d.table.Add(setup...); err != nil {
		return fmt.Errorf("setup rules: %w", err)
	}
	// vxlan0, port 1. UDP datagrams are merged toward the pods once a pod
	// TAP shows that the kernel takes UDP super-frames (usoSeen).
	vx, err := vxlan.Listen(vxlan.Config{Local: d.node.NodeIP, Port: d.cfg.VXLANPort, Peers: d.peers,
		Offload: d.offload(), Readers: d.vxlanReaders(), Logger: d.log})
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
	gw, err := tap.Create(tap.Config{Name: "tun0", Logger: d.log})
	if err != nil {
		return fmt.Errorf("tun0: %w", err)
	}
	if err := d.sw.AddPort(sdn.PortTun0, gw); err != nil {
		gw.Close()
		return err
	}
	if err := gateway.Configure("tun0", d.node); err != nil {
		return fmt.Errorf("tun0: %w", err)
	}
	if d.cfg.NAT == nil || *d.cfg.NAT {
		if err := nat.EnsureMasquerade(d.node.ClusterNetworks); err != nil {
			return fmt.Errorf("NAT egress: %w", err)
		}
	}
	for _, p := range d.cfg.Peers {
		if err := d.AddRemote(p); err != nil {
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

// applyPodRules installs a pod's rules, with its VNID's isolation rules
// when it is the VNID's first local pod, in one table update.
func (d *Daemon) applyPodRules(p sdn.Pod) error {
	rules, err := sdn.PodRules(d.node, p)
	if err != nil {
		return err
	}
	if d.node.Mode == sdn.ModeMultitenant && p.VNID != 0 && d.vnids[p.VNID] == 0 {
		vr, err := sdn.VNIDRules(d.node, p.VNID)
		if err != nil {
			return err
		}
		rules = append(rules, vr...)
	}
	return d.table.Apply(nil, rules)
}

// AddRemote installs the rules for a remote node and accepts its VXLAN.
func (d *Daemon) AddRemote(p PeerConfig) error {
	ip, err := netip.ParseAddr(p.IP)
	if err != nil {
		return fmt.Errorf("peer %s: ip: %w", p.Name, err)
	}
	sub, err := netip.ParsePrefix(p.Subnet)
	if err != nil {
		return fmt.Errorf("peer %s: subnet: %w", p.Name, err)
	}
	rn := sdn.RemoteNode{Name: p.Name, IP: ip, Subnet: sub}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.node.CheckRemote(rn); err != nil {
		return err
	}
	rules, err := sdn.NodeRules(d.node, rn)
	if err == nil {
		err = d.table.Apply([]flowtable.Filter{cookieFilter(sdn.NodeCookie(ip))}, rules)
	}
	if err != nil {
		return fmt.Errorf("peer %s: %w", p.Name, err)
	}
	d.remotes[ip] = rn
	if err := d.peers.Add(ip); err != nil {
		return fmt.Errorf("peer %s: %w", p.Name, err)
	}
	return nil
}

func cookieFilter(c uint64) flowtable.Filter {
	return flowtable.Filter{Table: -1, Cookie: c, CookieMask: ^uint64(0)}
}

// RemoveRemote removes a remote node's rules and stops accepting its VXLAN.
// Removing an unknown node is not an error.
func (d *Daemon) RemoveRemote(ip netip.Addr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.table.Apply([]flowtable.Filter{cookieFilter(sdn.NodeCookie(ip))}, nil); err != nil {
		return fmt.Errorf("remove remote %s: %w", ip, err)
	}
	delete(d.remotes, ip)
	d.peers.Remove(ip)
	return nil
}

// SetProjectVNID records a project's VNID and re-tags the project's local
// pods that have another one: each pod's rules (sdn.PodFilter) are replaced
// by rules with the new VNID, and the VNID isolation rules follow the first
// and last local pod of each VNID, all in one atomic table update.
func (d *Daemon) SetProjectVNID(project string, vnid uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.projects.set(project, vnid)
	if d.node.Mode != sdn.ModeMultitenant {
		return nil
	}
	var dels []flowtable.Filter
	var rules []*flowtable.Rule
	var errs []error
	add := func(rs []*flowtable.Rule, err error) {
		rules = append(rules, rs...)
		errs = append(errs, err)
	}
	var moved []*Pod
	counts := maps.Clone(d.vnids)
	for _, p := range d.pods {
		if p.Project != project || p.VNID == vnid {
			continue
		}
		dels = append(dels, cookieFilter(sdn.PodCookie(p.IP)))
		add(sdn.PodRules(d.node, sdn.Pod{Name: p.Name, Namespace: p.Project, IP: p.IP, Port: p.Port, VNID: vnid}))
		if counts[p.VNID]--; counts[p.VNID] == 0 && p.VNID != 0 {
			dels = append(dels, cookieFilter(sdn.VNIDCookie(p.VNID)))
		}
		if counts[vnid] == 0 {
			add(sdn.VNIDRules(d.node, vnid))
		}
		counts[vnid]++
		moved = append(moved, p)
	}
	if len(moved) == 0 {
		return nil
	}
	err := errors.Join(errs...)
	if err == nil {
		err = d.table.Apply(dels, rules)
	}
	if err != nil {
		return fmt.Errorf("re-tag project %s: %w", project, err)
	}
	for v, n := range counts {
		if n <= 0 {
			delete(counts, v)
		}
	}
	d.vnids = counts
	for _, p := range moved {
		d.log.Info("pod re-tagged", "pod", p.Name, "project", project, "from", p.VNID, "to", vnid)
		p.VNID = vnid
	}
	return nil
}

// vnidFor returns the VNID a pod of project gets: 0 in the modes without
// tenant isolation; otherwise the project's, waiting (Config.VNIDWait) for
// gvs-master to create a project the node does not know yet. It never
// falls back to VNID 0: the error wraps ErrNoVNID.
func (d *Daemon) vnidFor(ctx context.Context, project string) (uint32, error) {
	if d.nodeConfig().Mode != sdn.ModeMultitenant {
		return 0, nil
	}
	wait, err := d.cfg.vnidWait()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return d.projects.wait(ctx, project)
}

// vnidLocked is the VNID a pod of project is attached with, read under
// d.mu, so that a change the follower applies (SetProjectVNID, which
// re-tags the attached pods under d.mu) cannot be missed; vnidFor made
// sure the project exists.
func (d *Daemon) vnidLocked(project string) (uint32, error) {
	if d.node.Mode != sdn.ModeMultitenant {
		return 0, nil
	}
	v, ok := d.projects.get(project)
	if !ok {
		return 0, fmt.Errorf("%w: project %q", ErrNoVNID, project)
	}
	return v, nil
}

// AddPod creates the pod's TAP, moves it into the pod's namespace as eth0
// (or pc.IfName), configures it and installs the pod's rules. On failure it
// undoes what it did.
func (d *Daemon) AddPod(ctx context.Context, pc PodConfig) (*Pod, error) {
	return d.addPod(ctx, pc, nil)
}

// podKey is a pod's key in d.pods: its CNI attachment, else its name.
func (pc PodConfig) podKey() string {
	if pc.ContainerID != "" {
		return pc.ContainerID + "/" + pc.IfName
	}
	return pc.Name
}

// podQueues is how many queues a new pod TAP gets (Config.Queues).
func (d *Daemon) podQueues() int { return max(d.cfg.Queues, 1) }

// vxlanReaders is how many receive sockets vxlan0 gets
// (Config.VXLANReaders, else Config.Queues).
func (d *Daemon) vxlanReaders() int {
	if d.cfg.VXLANReaders > 0 {
		return d.cfg.VXLANReaders
	}
	return d.podQueues()
}

// createQueues creates the TAP cfg and opens n-1 more queues of it (cfg must
// then be MultiQueue), in the calling thread's namespace. It returns the
// first queue and the others.
func createQueues(cfg tap.Config, n int) (*tap.Device, []*tap.Device, error) {
	dev, err := tap.Create(cfg)
	if err != nil {
		return nil, nil, err
	}
	cfg.Name = dev.Name()
	extra, err := openQueues(cfg, n-1)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return dev, extra, nil
}

// portQueues is a pod port's queues for the switch: first, then extra.
func portQueues(first vswitch.Port, extra []*tap.Device) []vswitch.Port {
	qs := []vswitch.Port{first}
	for _, q := range extra {
		qs = append(qs, q)
	}
	return qs
}

// openQueues attaches n more queues to the multi-queue TAP cfg.Name in the
// calling thread's namespace.
func openQueues(cfg tap.Config, n int) ([]*tap.Device, error) {
	cfg.MultiQueue = true
	var qs []*tap.Device
	for i := range n {
		q, err := tap.Open(cfg)
		if err != nil {
			for _, q := range qs {
				q.Close()
			}
			return nil, fmt.Errorf("tap %s: extra queue %d: %w", cfg.Name, i+1, err)
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// addPod is AddPod with an optional pre-created TAP (from the CNI TAP
// pool), which it owns from then on.
func (d *Daemon) addPod(ctx context.Context, pc PodConfig, dev *tap.Device) (_ *Pod, err error) {
	var extra []*tap.Device // the TAP's other queues, until the switch owns them
	defer func() {
		if err == nil {
			return
		}
		if dev != nil {
			dev.Close()
		}
		for _, q := range extra {
			q.Close()
		}
	}()
	ip, err := netip.ParseAddr(pc.IP)
	if err != nil {
		return nil, fmt.Errorf("ip: %w", err)
	}
	nsPath := pc.Netns
	if !strings.ContainsRune(nsPath, '/') {
		nsPath = filepath.Join("/run/netns", nsPath)
	}
	// Wait for the project's VNID before anything is created, and outside
	// the lock: a new project's VNID comes from gvs-master.
	if _, err := d.vnidFor(ctx, pc.Project); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, dup := d.pods[pc.podKey()]; dup {
		return nil, fmt.Errorf("pod %s is already attached", pc.podKey())
	}
	port := pc.Port
	if port == 0 {
		for d.portUsed(d.nextPort) {
			d.nextPort++
		}
		port = d.nextPort
	}
	ifName := pc.IfName
	if ifName == "" {
		ifName = "eth0"
	}
	vnid, err := d.vnidLocked(pc.Project)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pc.Name, err)
	}
	sp := sdn.Pod{Name: pc.Name, Namespace: pc.Project, IP: ip, Port: port, VNID: vnid}
	if err := d.node.CheckPod(sp); err != nil {
		return nil, err
	}
	mac := packet.PodMAC(ip.As4())
	hw := net.HardwareAddr(mac[:])
	p := &Pod{Name: pc.Name, Project: pc.Project, Netns: nsPath, IP: ip, MAC: hw.String(), Port: port, VNID: sp.VNID,
		ContainerID: pc.ContainerID, IfName: pc.IfName}

	inPod := dev == nil
	if inPod {
		// Create the TAP inside the pod's namespace: moving a link between
		// namespaces waits for RCU grace periods (10-25 ms, docs/cni.md).
		cfg := tap.Config{Name: fmt.Sprintf("gvs%d", port), Offloads: d.podOffloads(), Logger: d.log,
			MultiQueue: d.podQueues() > 1}
		if err := netconf.Do(nsPath, func() (err error) {
			dev, extra, err = createQueues(cfg, d.podQueues())
			return err
		}); err != nil {
			return nil, err
		}
	} else if d.podQueues() > 1 {
		// A pooled TAP, multi-queue as the pool makes them with queues > 1
		// (cni.go): attach its other queues while it is still here.
		extra, err = openQueues(tap.Config{Name: dev.Name(), Offloads: d.podOffloads(), Logger: d.log}, d.podQueues()-1)
		if err != nil {
			return nil, err
		}
	}
	tapName, podDev := dev.Name(), dev
	d.usoSeen(dev)
	if err := d.sw.AddPortQueues(port, portQueues(d.podPort(pc, dev), extra)); err != nil {
		return nil, err
	}
	extra = nil
	dev = nil // the switch owns it now
	persisted := false
	defer func() {
		if err != nil {
			if persisted {
				unpersist(podDev, d.log) // so that closing it deletes it (restart.go)
			}
			_ = d.sw.RemovePort(port) // closes the TAP, which deletes the link
		}
	}()
	if !inPod {
		if err := netconf.MoveToNS(tapName, nsPath); err != nil {
			return nil, err
		}
	}
	gw := d.node.Gateway()
	routes := []netconf.Route{{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Gw: gw}}
	if d.node.ServiceNetwork.IsValid() {
		routes = append(routes, netconf.Route{Dst: d.node.ServiceNetwork, Gw: gw})
	}
	for _, cn := range d.node.ClusterNetworks {
		routes = append(routes, netconf.Route{Dst: cn})
	}
	err = netconf.ConfigureLink(nsPath, netconf.LinkConfig{
		Name: tapName, NewName: ifName, MAC: hw, MTU: d.node.MTU,
		Addrs:  []netip.Prefix{netip.PrefixFrom(ip, d.node.Subnet.Bits())},
		Routes: routes, Up: true,
	})
	if err != nil {
		return nil, err
	}
	d.capPodGSO(nsPath, ifName, d.node.MTU)
	if pc.ContainerID != "" {
		// A CNI pod's TAP outlives the daemon (restart.go). Set after the
		// rename, so that a TAP left by a crash is always found as IfName.
		if err := podDev.SetPersist(true); err != nil {
			return nil, err
		}
		persisted = true
	}
	p.dev = podDev
	if err := d.applyPodRules(sp); err != nil {
		return nil, err
	}
	d.vnids[p.VNID]++
	d.pods[pc.podKey()] = p
	if port == d.nextPort {
		d.nextPort++
	}
	d.log.Info("pod attached", "pod", p.Name, "project", p.Project, "ip", p.IP, "port", p.Port, "vnid", p.VNID)
	return p, nil
}

// Pods lists the attached pods by port.
func (d *Daemon) Pods() []Pod {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Pod, 0, len(d.pods))
	for _, p := range d.pods {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

// Switch returns the daemon's switch.
func (d *Daemon) Switch() *vswitch.Switch { return d.sw }

// listenLocal opens a local socket with listen and lets only the processes
// Config.SocketGroup allows use it (root and, if set, the group's members,
// by SO_PEERCRED); refuse answers the others in the socket's protocol.
func (d *Daemon) listenLocal(path string, listen func(string) (net.Listener, error), refuse func(net.Conn, error)) (net.Listener, error) {
	p, err := d.cfg.socketPolicy()
	if err != nil {
		return nil, err
	}
	l, err := listen(path)
	if err != nil {
		return nil, err
	}
	if err := accept.SocketMode(path, p); err != nil {
		l.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return accept.Guard(l, p, func(c net.Conn, err error) {
		d.log.Warn("local socket: connection refused", "socket", path, "err", err)
		refuse(c, err)
	}), nil
}
