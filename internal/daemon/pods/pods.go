// Package pods is gvs-switchd's pod lifecycle, in one place: attaching a
// pod (its TAP created in the pod's namespace, or a pre-created one moved
// there; its switch port; its address, MAC, routes and MTU; its rules),
// adopting the TAP a previous daemon left (persist.go), detaching it, and
// the CNI backend on top of them (cni.go).
//
// The Manager holds no lock across namespace, netlink or switch work: it
// reserves a pod's key and port under a short lock, does the slow work
// unlocked, and records the pod at the end, so attachments of different
// pods run in parallel. Rules are the Program's business (sdn/node),
// ports the switch's; the Manager drives both through narrow interfaces.
package pods

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"

	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/tap"
	vswitch "github.com/gvswitch/gvs/vswitch"
	"github.com/gvswitch/gvs/vxlan"
)

// Sentinel errors.
var (
	// ErrAttached: a pod with this key is attached, or being attached.
	ErrAttached = errors.New("pod is already attached")
	// ErrPortTaken: the switch port asked for belongs to another pod.
	ErrPortTaken = errors.New("switch port is taken")
)

// Switch is what the Manager needs of the switch.
type Switch interface {
	AddPortQueues(no uint32, queues []vswitch.Port) error
	// SetPortLimit sets a port's bandwidth limit (vswitch.Switch).
	SetPortLimit(no uint32, l vswitch.Limit) error
	RemovePort(no uint32) error
	Ports() []vswitch.PortInfo
}

// Program is what the Manager needs of the rule program (sdn/node).
type Program interface {
	Node() sdn.NodeConfig
	// AddPod installs the pod's rules with its project's VNID.
	AddPod(sdn.Pod) (sdn.Pod, error)
	RemovePod(ip netip.Addr) error
	Pod(ip netip.Addr) (sdn.Pod, bool)
	PodRules(ip netip.Addr) (got, want int)
}

// VNIDs makes sure a project has a VNID before its pod is attached,
// waiting a bounded time for a new one, and, in networkpolicy mode, that
// the pod itself is known (its labels, which policies select on), unless
// pod is "" (a running pod adopted after a restart); it fails closed.
type VNIDs interface {
	Wait(ctx context.Context, project, pod string) error
}

// Config configures a Manager.
type Config struct {
	Switch  Switch
	Program Program
	VNIDs   VNIDs
	// Queues is how many queues a new pod TAP gets (at least 1).
	Queues int
	// Offloads are the TAP offloads pods get (tap.OffloadsTSO, ...); with
	// any, the pod's gso_max_segs is capped so that its super-frames fit
	// vxlan0's segmentation.
	Offloads uint
	// OnTAP, if set, is told of every pod TAP put on the switch (the
	// daemon turns on UDP merging once a TAP takes USO).
	OnTAP func(*tap.Device)
	// FirstPort is where automatically numbered ports start
	// (sdn.FirstPodPort by default).
	FirstPort uint32
	// Engine, if set, is how the switch drives each queue of a pod TAP (an
	// I/O engine around the device: uring.NewPort); nil: the device
	// itself.
	Engine func(*tap.Device) vswitch.Port
	// OnChange, if set, is called after a pod is attached or detached.
	OnChange func()
	Logger   *slog.Logger
}

// Spec is a pod to attach.
type Spec struct {
	Name    string
	Project string
	// Netns is the pod's network namespace: a path, or a name under
	// /run/netns.
	Netns string
	IP    netip.Addr
	// IfName is the interface in the pod (default eth0).
	IfName string
	// ContainerID, set for pods attached by CNI, keys the pod with IfName;
	// their TAPs are persistent (they outlive the daemon).
	ContainerID string
	// Port is the switch port (0: the next free one).
	Port uint32
	// Limit is the pod's bandwidth limit (zero: none), set on its switch
	// port before it carries a frame of the pod's.
	Limit vswitch.Limit
}

// Key is the pod's key: "CONTAINERID/IFNAME" for a CNI pod, else its name.
func (s Spec) Key() string {
	if s.ContainerID != "" {
		return s.ContainerID + "/" + s.IfName
	}
	return s.Name
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
	// Limit is the pod's bandwidth limit, in bytes per second and bytes
	// (defaults filled in by the switch), nil without one.
	Limit *vswitch.Limit `json:"limit,omitempty"`

	dev   *tap.Device   // the pod's TAP (the switch owns it)
	extra []*tap.Device // its other queues (multi-queue)
}

// Manager attaches and detaches pods. Its methods are safe for concurrent
// use; calls for the same pod must not overlap (the CNI server serializes
// them per container).
type Manager struct {
	cfg Config
	log *slog.Logger
	// exiting is set when the daemon exits: the switch's closing the CNI
	// pods' TAPs then leaves them in place (persist.go).
	exiting atomic.Bool

	mu       sync.Mutex
	pods     map[string]*Pod // attached, by key
	busy     map[string]bool // keys being attached
	ports    map[uint32]bool // ports attached or reserved
	nextPort uint32
	// inherited are the TAP queues a live upgrade handed over, by
	// containerID/ifName, until Adopt takes them (handoff.go).
	inherited map[string][]*tap.Device
}

// New returns a Manager.
func New(cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Queues = max(cfg.Queues, 1)
	if cfg.FirstPort == 0 {
		cfg.FirstPort = sdn.FirstPodPort
	}
	return &Manager{cfg: cfg, log: cfg.Logger, pods: map[string]*Pod{}, busy: map[string]bool{},
		ports: map[uint32]bool{}, nextPort: cfg.FirstPort}
}

// NsPath is a namespace given by name or path, as a path.
func NsPath(ns string) string {
	if !strings.ContainsRune(ns, '/') {
		return filepath.Join("/run/netns", ns)
	}
	return ns
}

// reserve claims key and a port for an attachment; release undoes it
// (keeping the port when the pod was attached).
func (m *Manager) reserve(key string, want uint32) (port uint32, release func(attached bool), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.pods[key]; dup || m.busy[key] {
		return 0, nil, fmt.Errorf("%w: %s", ErrAttached, key)
	}
	port = want
	if port == 0 {
		for m.ports[m.nextPort] {
			m.nextPort++
		}
		port = m.nextPort
		m.nextPort++
	} else if m.ports[port] {
		return 0, nil, fmt.Errorf("%w: %s asks for port %d", ErrPortTaken, key, port)
	}
	m.busy[key], m.ports[port] = true, true
	return port, func(attached bool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.busy, key)
		if !attached {
			delete(m.ports, port)
		}
	}, nil
}

// record adds an attached pod.
func (m *Manager) record(key string, p *Pod) {
	m.mu.Lock()
	m.pods[key] = p
	m.mu.Unlock()
	m.changed()
}

// changed calls Config.OnChange.
func (m *Manager) changed() {
	if m.cfg.OnChange != nil {
		m.cfg.OnChange()
	}
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

// portQueues is a pod port's queues for the switch: first, then extra.
func (m *Manager) portQueues(first vswitch.Port, extra []*tap.Device) []vswitch.Port {
	qs := []vswitch.Port{first}
	for _, q := range extra {
		qs = append(qs, m.io(q))
	}
	return qs
}

// io is the switch's port for a TAP queue (Config.Engine).
func (m *Manager) io(dev *tap.Device) tapIO {
	if m.cfg.Engine != nil {
		if p, ok := m.cfg.Engine(dev).(tapIO); ok {
			return p
		}
	}
	return dev
}

// tapIO is a TAP queue as the switch drives it: the device, or an I/O
// engine around it. Both can be woken (idle trimming).
type tapIO interface {
	vswitch.Port
	vswitch.Waker
}

func closeAll(dev *tap.Device, extra []*tap.Device) {
	if dev != nil {
		dev.Close()
	}
	for _, q := range extra {
		q.Close()
	}
}

// Routes are a pod's routes: default and service network via the gateway,
// cluster networks on-link.
func Routes(node sdn.NodeConfig) []netconf.Route {
	gw := node.Gateway()
	rs := []netconf.Route{{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Gw: gw}}
	if node.ServiceNetwork.IsValid() {
		rs = append(rs, netconf.Route{Dst: node.ServiceNetwork, Gw: gw})
	}
	for _, cn := range node.ClusterNetworks {
		rs = append(rs, netconf.Route{Dst: cn})
	}
	return rs
}

// Add attaches a pod: it waits for the project's VNID, creates the TAP in
// the pod's namespace (or takes dev, a pre-created TAP from the CNI pool,
// which it owns from then on, and moves it there), puts it on the switch,
// configures the link and installs the pod's rules. On failure it undoes
// what it did.
func (m *Manager) Add(ctx context.Context, s Spec, dev *tap.Device) (_ Pod, err error) {
	var extra []*tap.Device // the TAP's other queues, until the switch owns them
	defer func() {
		if err != nil {
			closeAll(dev, extra)
		}
	}()
	if s.IfName == "" {
		s.IfName = "eth0"
	}
	nsPath := NsPath(s.Netns)
	// Wait for the project's VNID before anything is created: a new
	// project's VNID comes from gvs-master (and, in networkpolicy mode,
	// for the pod's labels from the API server).
	if err := m.cfg.VNIDs.Wait(ctx, s.Project, s.Name); err != nil {
		return Pod{}, err
	}
	key := s.Key()
	port, release, err := m.reserve(key, s.Port)
	if err != nil {
		return Pod{}, err
	}
	attached := false
	defer func() { release(attached) }()
	node := m.cfg.Program.Node()
	if err := node.CheckPod(sdn.Pod{Name: s.Name, Namespace: s.Project, IP: s.IP, Port: port}); err != nil {
		return Pod{}, err
	}
	mac := packet.PodMAC(s.IP.As4())
	hw := net.HardwareAddr(mac[:])
	if dev == nil {
		// Create the TAP inside the pod's namespace: moving a link between
		// namespaces waits for RCU grace periods (10-25 ms, docs/cni.md).
		cfg := tap.Config{Name: fmt.Sprintf("gvs%d", port), Offloads: m.cfg.Offloads, Logger: m.log,
			MultiQueue: m.cfg.Queues > 1}
		if err := netconf.Do(nsPath, func() (err error) {
			dev, extra, err = createQueues(cfg, m.cfg.Queues)
			return err
		}); err != nil {
			return Pod{}, err
		}
	} else {
		if m.cfg.Queues > 1 {
			// A pooled TAP, multi-queue as the pool makes them with queues > 1:
			// attach its other queues while it is still here.
			if extra, err = openQueues(tap.Config{Name: dev.Name(), Offloads: m.cfg.Offloads, Logger: m.log}, m.cfg.Queues-1); err != nil {
				return Pod{}, err
			}
		}
		if err := netconf.MoveToNS(dev.Name(), nsPath); err != nil {
			return Pod{}, err
		}
	}
	tapName, podDev, podExtra := dev.Name(), dev, extra
	if m.cfg.OnTAP != nil {
		m.cfg.OnTAP(dev)
	}
	if err := m.cfg.Switch.AddPortQueues(port, m.portQueues(m.portOf(s, dev), extra)); err != nil {
		return Pod{}, err
	}
	dev, extra = nil, nil // the switch owns them now
	persisted := false
	defer func() {
		if err != nil {
			if persisted {
				unpersist(podDev, m.log) // so that closing it deletes it (persist.go)
			}
			_ = m.cfg.Switch.RemovePort(port) // closes the TAP, which deletes the link
		}
	}()
	// The limit is on the port before the pod has an address or rules:
	// no frame of the pod's passes unlimited.
	if err := m.setLimit(port, s.Limit); err != nil {
		return Pod{}, err
	}
	err = netconf.ConfigureLink(nsPath, netconf.LinkConfig{
		Name: tapName, NewName: s.IfName, MAC: hw, MTU: node.MTU,
		Addrs:  []netip.Prefix{netip.PrefixFrom(s.IP, node.Subnet.Bits())},
		Routes: Routes(node), Up: true,
	})
	if err != nil {
		return Pod{}, err
	}
	m.capGSO(nsPath, s.IfName, node.MTU)
	if s.ContainerID != "" {
		// A CNI pod's TAP outlives the daemon (persist.go). Set after the
		// rename, so that a TAP left by a crash is always found as IfName.
		if err := podDev.SetPersist(true); err != nil {
			return Pod{}, err
		}
		persisted = true
	}
	sp, err := m.cfg.Program.AddPod(sdn.Pod{Name: s.Name, Namespace: s.Project, IP: s.IP, Port: port})
	if err != nil {
		return Pod{}, err
	}
	p := &Pod{Name: s.Name, Project: s.Project, Netns: nsPath, IP: s.IP, MAC: hw.String(), Port: port, VNID: sp.VNID,
		ContainerID: s.ContainerID, IfName: s.IfName, Limit: limitOf(s), dev: podDev, extra: podExtra}
	if s.ContainerID == "" {
		p.IfName = "" // as configured: static pods are keyed by name
	}
	m.record(key, p)
	attached = true
	m.log.Info("pod attached", "pod", p.Name, "project", p.Project, "ip", p.IP, "port", p.Port, "vnid", p.VNID)
	return *p, nil
}

// setLimit sets a new pod port's bandwidth limit, if it has one.
func (m *Manager) setLimit(port uint32, l vswitch.Limit) error {
	if l.IsZero() {
		return nil
	}
	if err := m.cfg.Switch.SetPortLimit(port, l); err != nil {
		return fmt.Errorf("bandwidth limit: %w", err)
	}
	return nil
}

// limitOf is the Pod's record of s's limit, with default bursts.
func limitOf(s Spec) *vswitch.Limit {
	if s.Limit.IsZero() {
		return nil
	}
	l := s.Limit
	l.Ingress, l.Egress = l.Ingress.WithDefaults(false), l.Egress.WithDefaults(true)
	return &l
}

// capGSO caps gso_max_segs of the pod's interface so that its TCP
// super-frames fit the segmentation of vxlan0 (with offloads only).
func (m *Manager) capGSO(nsPath, ifName string, mtu int) {
	segs := vxlan.GSOSegments(mtu)
	if m.cfg.Offloads == 0 || segs == 0 {
		return
	}
	err := netconf.Do(nsPath, func() error {
		l, err := netlink.LinkByName(ifName)
		if err != nil {
			return err
		}
		return netlink.LinkSetGSOMaxSegs(l, segs)
	})
	if err != nil {
		m.log.Warn("cannot cap gso_max_segs of a pod interface", "netns", nsPath, "link", ifName,
			"segs", segs, "err", fmt.Errorf("gso_max_segs: %w", err))
	}
}

// Delete detaches a pod: its rules, then its switch port, which closes the
// TAP and so deletes its interface (a CNI pod's TAP is made non-persistent
// first). key is the pod's name, or "CONTAINERID/IFNAME" for a pod
// attached by CNI. An unknown pod is not an error.
func (m *Manager) Delete(key string) error {
	m.mu.Lock()
	p := m.pods[key]
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := m.cfg.Program.RemovePod(p.IP); err != nil {
		return err
	}
	unpersist(p.dev, m.log)
	if err := m.cfg.Switch.RemovePort(p.Port); err != nil && !errors.Is(err, vswitch.ErrNoSuchPort) {
		m.log.Warn("pod detach: switch port", "pod", key, "port", p.Port, "err", err)
	}
	m.mu.Lock()
	delete(m.pods, key)
	delete(m.ports, p.Port)
	m.mu.Unlock()
	m.changed()
	m.log.Info("pod detached", "pod", p.Name, "ip", p.IP, "port", p.Port)
	return nil
}

// Withdraw detaches the pods whose rules the Program withdrew with the
// node's subnet (sdn/node ChangeSubnet): their switch ports go, which
// deletes their interfaces; the runtime must re-create them.
func (m *Manager) Withdraw(gone []sdn.Pod) error {
	defer m.changed()
	var errs []error
	for _, sp := range gone {
		m.mu.Lock()
		var key string
		var p *Pod
		for k, q := range m.pods {
			if q.IP == sp.IP {
				key, p = k, q
			}
		}
		if p != nil {
			delete(m.pods, key)
			delete(m.ports, p.Port)
		}
		m.mu.Unlock()
		if p == nil {
			continue
		}
		unpersist(p.dev, m.log)
		if err := m.cfg.Switch.RemovePort(p.Port); err != nil && !errors.Is(err, vswitch.ErrNoSuchPort) {
			errs = append(errs, fmt.Errorf("pod %s: switch port %d: %w", p.Name, p.Port, err))
		}
		m.log.Error("pod detached: its address belongs to another node's subnet now; the runtime must re-create it",
			"pod", p.Name, "project", p.Project, "ip", p.IP, "containerID", p.ContainerID)
	}
	return errors.Join(errs...)
}

// Get returns the pod with key.
func (m *Manager) Get(key string) (Pod, bool) {
	m.mu.Lock()
	p, ok := m.pods[key]
	m.mu.Unlock()
	if !ok {
		return Pod{}, false
	}
	return m.withVNID(*p), true
}

// withVNID fills in the pod's current VNID (a re-tag changes it).
func (m *Manager) withVNID(p Pod) Pod {
	if sp, ok := m.cfg.Program.Pod(p.IP); ok {
		p.VNID = sp.VNID
	}
	return p
}

// List returns the attached pods by port.
func (m *Manager) List() []Pod {
	m.mu.Lock()
	out := make([]Pod, 0, len(m.pods))
	for _, p := range m.pods {
		out = append(out, *p)
	}
	m.mu.Unlock()
	for i := range out {
		out[i] = m.withVNID(out[i])
	}
	slices.SortFunc(out, func(a, b Pod) int { return int(a.Port) - int(b.Port) })
	return out
}

// Len is the number of attached pods.
func (m *Manager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pods)
}
