package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/user"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/gvswitch/gvs/internal/accept"
	"github.com/gvswitch/gvs/internal/sched"
	"github.com/gvswitch/gvs/port/busypoll"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/sdn/why"
	"github.com/gvswitch/gvs/tap/uring"
	"github.com/gvswitch/gvs/vxlan"
)

// Config is gvs-switchd's configuration file (JSON). Until the control
// plane and the CNI plugin exist, peers and pods are listed statically.
type Config struct {
	NodeName        string   `json:"nodeName"`
	NodeIP          string   `json:"nodeIP"`
	Subnet          string   `json:"subnet"`
	Mode            string   `json:"mode"`
	ClusterNetworks []string `json:"clusterNetworks"`
	ServiceNetwork  string   `json:"serviceNetwork"`
	MTU             int      `json:"mtu,omitempty"`
	VXLANPort       uint16   `json:"vxlanPort,omitempty"`
	// Projects maps project names to VNIDs (multitenant mode, without
	// the control plane). A pod of a project that is not listed is not
	// attached (CNI code 11): isolation fails closed.
	Projects map[string]uint32 `json:"projects,omitempty"`
	Peers    []PeerConfig      `json:"peers,omitempty"`
	Pods     []PodConfig       `json:"pods,omitempty"`
	// ControlSocket is the unix socket gvsctl talks to.
	ControlSocket string `json:"controlSocket,omitempty"`
	// HandoffSocket is where the daemon listens for its successor, and
	// where a starting daemon looks for a running one to take over from
	// without a gap (a live upgrade, handoff.go; docs/operations.md). ""
	// means /run/gvs/handoff.sock; "off" turns both off. Its directory
	// must be root's and writable by root only.
	HandoffSocket string `json:"handoffSocket,omitempty"`
	// AfterHandoff is what the daemon does once it has handed everything
	// to a successor: "exit" (the default) or "wait": stay, idle and
	// holding nothing, until SIGTERM, so that a supervisor that restarts
	// exited processes (a DaemonSet's kubelet) does not start the old
	// version again, which would take over from the new one.
	AfterHandoff string `json:"afterHandoff,omitempty"`
	// MetricsAddr is where /metrics listens, in the node's namespace;
	// "" means 127.0.0.1:9101, "off" disables it.
	MetricsAddr string `json:"metricsAddr,omitempty"`
	// TraceAddr is where the node's read-only trace endpoint listens
	// (sdn/why: gvsctl why and gvs-master's console trace this node's
	// tables through it, over mutual TLS with the node's certificate,
	// admitting only administrators and gvs-master). "" means nodeIP:9447
	// when the node has a certificate for it (TraceTLS, or etcdTLS when
	// it follows the registry), and no endpoint otherwise; "off" disables
	// it. Without a certificate of the gvs cluster CA there is none.
	TraceAddr string `json:"traceAddr,omitempty"`
	// TraceTLS names the node's certificate for the trace endpoint
	// (gvs-master cert node NAME, issued by the gvs cluster CA, whose
	// ca.crt is also the CA the clients' certificates must come from).
	// Default: etcdTLS. In Kubernetes mode, where the node has no etcd
	// identity, it is how the endpoint is enabled (docs/operations.md).
	TraceTLS pki.Files `json:"traceTLS,omitzero"`
	// NAT installs the nftables masquerade rule for egress (default true).
	NAT *bool `json:"nat,omitempty"`
	// Offload turns on the data-path offloads (default true): TSO on pod
	// TAPs, UDP GRO/GSO on vxlan0 (each probed), super-frames through the
	// switch. false keeps every frame MTU-sized end to end.
	Offload *bool `json:"offload,omitempty"`
	// EtcdEndpoints, when set, makes the node follow the control plane
	// (internal/daemon/etcdsource): it registers with a lease, takes its subnet from
	// gvs-master, learns remote nodes and project VNIDs live, and fills
	// subnet, clusterNetworks, serviceNetwork, mode and vxlanPort from the
	// registry when they are not given here. Peers and projects listed
	// statically are then ignored.
	EtcdEndpoints []string `json:"etcdEndpoints,omitempty"`
	// EtcdTLS names the node's CA, certificate and key files for etcd
	// (issued by gvs-master cert node NAME; docs/security.md). Required
	// with https endpoints; the files are re-read when replaced.
	EtcdTLS pki.Files `json:"etcdTLS,omitzero"`
	// EtcdInsecure allows plain-text http endpoints without certificates:
	// lab use only (anyone who reaches etcd can change the network).
	EtcdInsecure bool `json:"etcdInsecure,omitempty"`
	// VNIDWait bounds how long attaching a pod waits for its project's
	// VNID when the project is new (gvs-master creates it on the node's
	// request); a Go duration, default 10s. Past it, CNI ADD fails with
	// code 11 and the runtime retries.
	VNIDWait string `json:"vnidWait,omitempty"`
	// SocketGroup is a group (name or number) whose members may use the
	// CNI and control sockets besides root; "" means root only.
	SocketGroup string `json:"socketGroup,omitempty"`
	// CNISocket is where gvs-switchd answers gvs-cni (docs/cni.md), such
	// as /run/gvs/cni.sock (the plugin's default); "" or "off" disables
	// CNI.
	CNISocket string `json:"cniSocket,omitempty"`
	// StateDir keeps the CNI address leases (StateDir/ipam) and, with the
	// control plane, the node's last subnet (StateDir/node-subnet); ""
	// means /var/lib/gvs/NODENAME.
	StateDir string `json:"stateDir,omitempty"`
	// TapPool is how many pod TAPs are kept pre-created for CNI ADD
	// (0: create each on demand).
	TapPool int `json:"tapPool,omitempty"`
	// Queues is how many queues vxlan0 and each new pod TAP have, each
	// read by a worker of its own (0 or 1: one; at most MaxQueues). vxlan0
	// gets that many readers (each with VXLANFlowQueues sockets, all
	// sharing the port with SO_REUSEPORT), pods multi-queue TAPs.
	// A restarted daemon adopts a CNI pod's TAP as it is: a single-queue
	// TAP stays single-queue, a multi-queue one gets Queues queues.
	Queues int `json:"queues,omitempty"`
	// VXLANReaders is how many readers vxlan0 has, each a worker of its
	// own with VXLANFlowQueues receive sockets (1..MaxQueues); 0 means
	// Queues.
	VXLANReaders int `json:"vxlanReaders,omitempty"`
	// VXLANFlowQueues is how many receive sockets each vxlan0 reader
	// drains in round robin, each peer flow landing in one of them by
	// its outer source port (vxlan's steer_linux.go), so that a ping or a DNS query does not wait behind a bulk
	// flow's backlog (1..64; 0 means vxlan.DefaultFlowQueues, 16; 1 turns
	// it off).
	VXLANFlowQueues int `json:"vxlanFlowQueues,omitempty"`
	// ConntrackMax is the connection tracker's entry limit (0:
	// conntrack.DefaultMaxEntries, 262 144, as Linux's nf_conntrack_max on
	// a node of 2 cores and 24 GiB); its storage is allocated at start.
	// ConntrackZoneLimit caps the entries of each zone (0: none but
	// ConntrackMax).
	ConntrackMax       int `json:"conntrackMax,omitempty"`
	ConntrackZoneLimit int `json:"conntrackZoneLimit,omitempty"`
	// Kubeconfig makes the node follow a Kubernetes API server (gvs-master
	// --kubeconfig keeps OpenShift SDN's objects there) instead of the etcd
	// registry: a kubeconfig file, or "in-cluster" for the ServiceAccount
	// of the pod the daemon runs in (the DaemonSet of deploy/). The node's
	// HostSubnet gives its subnet; nodeName is required.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// CNIBinDir and CNIConfDir install the CNI plugin on the host, as
	// gvs-switchd's DaemonSet does (deploy/gvs-node.yaml): once the CNI
	// socket listens, the plugin is copied into CNIBinDir as "gvs" (its
	// network type) and a network configuration list written into
	// CNIConfDir, both atomically, so the runtime starts pods only when
	// the daemon can attach them. Absolute paths; "" installs nothing.
	CNIBinDir  string `json:"cniBinDir,omitempty"`
	CNIConfDir string `json:"cniConfDir,omitempty"`
	// CNIPlugin is the plugin binary CNIBinDir receives; "" means gvs-cni
	// beside gvs-switchd's own executable.
	CNIPlugin string `json:"cniPlugin,omitempty"`
	// EgressDNSServer is the DNS server (IP:port) that resolves the DNS
	// names of egress firewalls; "" means the system's resolver.
	// EgressDNSInterval is how often they are resolved again (a Go
	// duration, default 30s): a name's rules follow its records.
	EgressDNSServer   string `json:"egressDNSServer,omitempty"`
	EgressDNSInterval string `json:"egressDNSInterval,omitempty"`
	// TrimIdle is how long a pod port's queue must carry nothing before
	// its worker gives its frame buffers' memory back to the system (a Go
	// duration, default DefaultTrimIdle; "0" never): a pod that carried
	// bulk traffic keeps ~4.7 MB of buffers resident until then.
	TrimIdle string `json:"trimIdle,omitempty"`
	// IOEngine is how pod TAPs move frames: "uring" (io_uring: one system
	// call per batch each way, Linux 6.7+; a pod's rings, and the OS
	// thread its receive ring is locked to, are made when the pod gets
	// busy and given up when it is idle for TrimIdle), "uring-always"
	// (io_uring with each pod's rings and thread from its first frame to
	// its removal: for measuring the difference), "tap" (read(2) and
	// write(2) per frame, every kernel), or "auto" or "" (uring where the
	// kernel has what it needs, else tap).
	IOEngine string `json:"ioEngine,omitempty"`
	// SchedSlice is the kernel scheduler time slice gvs-switchd asks for
	// its threads while tasks wait for the node's CPUs (a Go duration from
	// 100us to 100ms; "" means DefaultSchedSlice; "0" leaves the threads
	// with the kernel's). A thread with a short slice preempts the task
	// running when a frame wakes it, instead of waiting up to the default
	// slice (1.4 ms on 2 CPUs), so a probe crossing a node busy with bulk
	// traffic waits less; CPU shares stay as they are. SchedSliceWhen
	// "busy" (or "") gives it while the kernel's CPU pressure is high
	// (some task waited for a CPU half the time; without PSI, the CPUs
	// 85 % busy) and takes it back when it falls, "always" keeps it
	// (docs/operations.md, internal/sched).
	// Linux 6.12 and later; on an older kernel the daemon logs that it has
	// no effect.
	SchedSlice     string `json:"schedSlice,omitempty"`
	SchedSliceWhen string `json:"schedSliceWhen,omitempty"`
	// BusyPoll is the longest a reader of vxlan0 or of a busy pod's
	// io_uring queue polls its empty queue before it sleeps (a Go duration
	// up to 1ms; "0": off; "": DefaultBusyPoll on a machine with more than
	// one CPU, off on one). Each reader's window follows its queue: it
	// grows while frames come soon after the queue runs dry and falls to
	// nothing on a sparse or idle queue (package busypoll). BusyPollers is
	// how many readers may poll at once (0: one fewer than the CPUs).
	// Polling saves wake-ups at the cost of CPU time the pods could use;
	// bench/results/history.md ("Busy polling") has what it gave and cost on 2
	// vCPUs.
	BusyPoll    string `json:"busyPoll,omitempty"`
	BusyPollers int    `json:"busyPollers,omitempty"`
	// GoMaxProcs is how many Go processors gvs-switchd runs its goroutines
	// on (runtime.GOMAXPROCS, 1..1024): 0 means Go's own default (the
	// CPUs the daemon may use) plus as many more, at most 8 more, unless
	// the GOMAXPROCS environment variable is set, which then decides.
	// With as many processors as CPUs, a worker that a frame wakes waits
	// in Go's run queue whenever every processor is held (by a bulk
	// worker, a polling reader, a thread in a system call) until one is
	// let go; with spare ones it runs at once on a thread of its own, and
	// the kernel's scheduler (with SchedSlice) decides who gets a CPU.
	// Once set, Go no longer follows a later change of the daemon's CPU
	// limit (a cgroup quota); a restart picks it up.
	// bench/results/history.md ("Go processors") has what it gave.
	GoMaxProcs int `json:"goMaxProcs,omitempty"`
	// RxBufferBudgetMiB bounds, in MiB, the memory the receive rings of
	// all pod queues may hold in frame buffers at once (port.Budget): 0
	// means the default, 16 MiB for each CPU and at least 64; -1 no bound.
	// A busy queue's ring grows toward 64 buffers of 64 KiB (4 MiB) under
	// bulk traffic, so 250 busy pods could hold a gigabyte; within the
	// budget a ring stops growing and works with what it has (at least 8
	// buffers each, taken even when the budget is spent), and a ring that
	// shrinks while others are refused, or goes idle, gives its buffers'
	// pages back at once. With ioEngine tap the same budget bounds how
	// many buffers a queue's batch of read(2)s may fill.
	RxBufferBudgetMiB int `json:"rxBufferBudgetMiB,omitempty"`
	// CNINetwork names the installed network configuration ("" means
	// DefaultCNINetwork); its file is CNIConfDir/80-NAME.conflist.
	CNINetwork string `json:"cniNetwork,omitempty"`
	// IPFIX exports the node's connections as IPFIX flow records to
	// collectors (ipfix.go; docs/operations.md, "Flow export"); nil
	// exports nothing and keeps no per-connection counts.
	IPFIX *IPFIXConfig `json:"ipfix,omitempty"`
}

// clone returns a deep copy of c: the daemon keeps one of its own (New),
// so that nothing it does writes the caller's configuration.
func (c *Config) clone() *Config {
	n := *c
	n.ClusterNetworks = slices.Clone(c.ClusterNetworks)
	n.Projects = maps.Clone(c.Projects)
	n.Peers = slices.Clone(c.Peers)
	n.Pods = slices.Clone(c.Pods)
	n.EtcdEndpoints = slices.Clone(c.EtcdEndpoints)
	n.NAT = clonePtr(c.NAT)
	n.Offload = clonePtr(c.Offload)
	if c.IPFIX != nil {
		x := *c.IPFIX
		x.Collectors = slices.Clone(x.Collectors)
		n.IPFIX = &x
	}
	return &n
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// MaxRxBufferBudgetMiB is the largest Config.RxBufferBudgetMiB (1 TiB).
const MaxRxBufferBudgetMiB = 1 << 20

// rxBufferBudget is Config.RxBufferBudgetMiB in bytes for ncpu CPUs; 0
// means no bound.
func (c *Config) rxBufferBudget(ncpu int) int64 {
	switch {
	case c.RxBufferBudgetMiB < 0:
		return 0
	case c.RxBufferBudgetMiB > 0:
		return int64(c.RxBufferBudgetMiB) << 20
	}
	return int64(max(64, 16*ncpu)) << 20
}

// MaxGoMaxProcs is the largest Config.GoMaxProcs.
const MaxGoMaxProcs = 1024

// GoProcs returns how many Go processors the daemon should run with
// (Config.GoMaxProcs), given Go's default and whether the GOMAXPROCS
// environment variable is set; 0 means leave Go's setting as it is.
func (c *Config) GoProcs(goDefault int, envSet bool) int {
	switch {
	case c.GoMaxProcs > 0:
		return c.GoMaxProcs
	case envSet:
		return 0
	}
	return goDefault + min(goDefault, maxSpareProcs)
}

// maxSpareProcs bounds the Go processors Config.GoMaxProcs's default adds
// to Go's: on a large node the spares matter less, and each one adds to
// what Go's garbage collector runs in parallel (a quarter of them).
const maxSpareProcs = 8

// InCluster is the Kubeconfig value that means the pod's own ServiceAccount.
const InCluster = "in-cluster"

// FromKubernetes reports whether the node follows a Kubernetes API server.
func (c *Config) FromKubernetes() bool { return c.Kubeconfig != "" }

// MaxQueues is the largest Config.Queues.
const MaxQueues = 16

// DefaultVNIDWait is Config.VNIDWait's default.
const DefaultVNIDWait = 10 * time.Second

// DefaultTrimIdle is Config.TrimIdle's default.
const DefaultTrimIdle = 10 * time.Second

// DefaultBusyPoll is Config.BusyPoll's default on a machine with more than
// one CPU.
const DefaultBusyPoll = 50 * time.Microsecond

// DefaultSchedSlice is Config.SchedSlice's default.
const DefaultSchedSlice = 100 * time.Microsecond

// I/O engines of Config.IOEngine.
const (
	IOEngineAuto        = "auto"
	IOEngineUring       = "uring"
	IOEngineUringAlways = "uring-always"
	IOEngineTAP         = "tap"
)

// ioEngine is Config.IOEngine resolved on this kernel: IOEngineUring,
// IOEngineUringAlways or IOEngineTAP, and why auto chose tap.
func (c *Config) ioEngine() (engine string, why error, err error) {
	switch c.IOEngine {
	case "", IOEngineAuto:
		if err := uring.Supported(); err != nil {
			return IOEngineTAP, err, nil
		}
		return IOEngineUring, nil, nil
	case IOEngineUring, IOEngineUringAlways:
		if err := uring.Supported(); err != nil {
			return "", nil, fmt.Errorf("ioEngine %q: %w", c.IOEngine, err)
		}
		return c.IOEngine, nil, nil
	case IOEngineTAP:
		return IOEngineTAP, nil, nil
	}
	return "", nil, fmt.Errorf("ioEngine %q: want auto, uring, uring-always or tap", c.IOEngine)
}

// trimIdle is Config.TrimIdle (0: off).
func (c *Config) trimIdle() (time.Duration, error) {
	if c.TrimIdle == "" {
		return DefaultTrimIdle, nil
	}
	d, err := time.ParseDuration(c.TrimIdle)
	if err != nil || d < 0 || (d > 0 && d < 100*time.Millisecond) {
		return 0, fmt.Errorf("trimIdle %q: want 0 (never) or a duration of 100ms or more, such as 10s", c.TrimIdle)
	}
	return d, nil
}

// schedSlice is Config.SchedSlice and SchedSliceWhen (slice 0: leave the
// threads alone).
func (c *Config) schedSlice() (slice time.Duration, always bool, err error) {
	switch c.SchedSliceWhen {
	case "", "busy":
	case "always":
		always = true
	default:
		return 0, false, fmt.Errorf("schedSliceWhen %q: want busy or always", c.SchedSliceWhen)
	}
	if c.SchedSlice == "" {
		return DefaultSchedSlice, always, nil
	}
	d, err := time.ParseDuration(c.SchedSlice)
	if err == nil && d == 0 {
		return 0, false, nil
	}
	if err == nil {
		err = sched.CheckSlice(d)
	}
	if err != nil {
		return 0, false, fmt.Errorf("schedSlice %q: want 0 (leave the threads alone) or a duration from %v to %v, such as 100us", c.SchedSlice, sched.MinSlice, sched.MaxSlice)
	}
	return d, always, nil
}

// busyPoll is Config.BusyPoll and BusyPollers as a busypoll.Config.
func (c *Config) busyPoll() (busypoll.Config, error) {
	var bc busypoll.Config
	if c.BusyPoll == "" && runtime.NumCPU() > 1 {
		bc.Max = DefaultBusyPoll
	}
	if c.BusyPoll != "" {
		d, err := time.ParseDuration(c.BusyPoll)
		if err != nil || d < 0 || d > busypoll.MaxWindow {
			return bc, fmt.Errorf("busyPoll %q: want 0 (off) or a duration up to %v, such as 50us", c.BusyPoll, busypoll.MaxWindow)
		}
		bc.Max = d
	}
	if c.BusyPollers < 0 {
		return bc, fmt.Errorf("busyPollers %d: want 0 (one fewer than the CPUs) or more", c.BusyPollers)
	}
	bc.Pollers = c.BusyPollers
	return bc, bc.Validate()
}

func (c *Config) vnidWait() (time.Duration, error) {
	if c.VNIDWait == "" {
		return DefaultVNIDWait, nil
	}
	d, err := time.ParseDuration(c.VNIDWait)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("vnidWait %q: want a positive duration such as 10s", c.VNIDWait)
	}
	return d, nil
}

// socketPolicy is who may use the CNI and control sockets: root, and the
// members of SocketGroup.
func (c *Config) socketPolicy() (accept.PeerPolicy, error) {
	if c.SocketGroup == "" {
		return accept.RootOnly, nil
	}
	if gid, err := strconv.Atoi(c.SocketGroup); err == nil && gid >= 0 {
		return accept.PeerPolicy{Group: gid}, nil
	}
	g, err := user.LookupGroup(c.SocketGroup)
	if err != nil {
		return accept.PeerPolicy{}, fmt.Errorf("socketGroup: %w", err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return accept.PeerPolicy{}, fmt.Errorf("socketGroup %s: gid %q: %w", c.SocketGroup, g.Gid, err)
	}
	return accept.PeerPolicy{Group: gid}, nil
}

// traceAddr returns where the trace endpoint listens, "" for nowhere
// (TraceAddr).
func (c *Config) traceAddr() string {
	switch {
	case c.TraceAddr == "off" || c.traceTLS().IsZero():
		return ""
	case c.TraceAddr != "":
		return c.TraceAddr
	case c.NodeIP != "" && (c.FromRegistry() || !c.TraceTLS.IsZero()):
		return net.JoinHostPort(c.NodeIP, strconv.Itoa(why.DefaultPort))
	}
	return ""
}

// traceTLS returns the trace endpoint's certificate files (TraceTLS).
func (c *Config) traceTLS() pki.Files {
	if !c.TraceTLS.IsZero() {
		return c.TraceTLS
	}
	return c.EtcdTLS
}

// dialConfig is how the node reaches etcd.
func (c *Config) dialConfig(log *slog.Logger) registry.DialConfig {
	return registry.DialConfig{Endpoints: c.EtcdEndpoints, TLS: c.EtcdTLS, Insecure: c.EtcdInsecure, Logger: log}
}

// FromRegistry reports whether the node follows the control plane.
func (c *Config) FromRegistry() bool { return len(c.EtcdEndpoints) > 0 }

// PeerConfig is a remote node.
type PeerConfig struct {
	Name   string `json:"name"`
	IP     string `json:"ip"`
	Subnet string `json:"subnet"`
}

// remote parses a configured peer.
func (p PeerConfig) remote() (sdn.RemoteNode, error) {
	ip, err := netip.ParseAddr(p.IP)
	if err != nil {
		return sdn.RemoteNode{}, fmt.Errorf("peer %s: ip: %w", p.Name, err)
	}
	sub, err := netip.ParsePrefix(p.Subnet)
	if err != nil {
		return sdn.RemoteNode{}, fmt.Errorf("peer %s: subnet: %w", p.Name, err)
	}
	return sdn.RemoteNode{Name: p.Name, IP: ip, Subnet: sub}, nil
}

// PodConfig is a pod to attach at start.
type PodConfig struct {
	Name    string `json:"name"`
	Project string `json:"project"`
	// Netns is the pod's network namespace: a path, or a name under /run/netns.
	Netns string `json:"netns"`
	// IP is the pod's address in the node subnet.
	IP string `json:"ip"`
	// IfName is the interface in the pod (default eth0).
	IfName string `json:"ifName,omitempty"`
	// ContainerID, set for pods attached by CNI, keys the pod with IfName.
	ContainerID string `json:"containerID,omitempty"`
	// Port is the switch port (0: the next free one).
	Port uint32 `json:"port,omitempty"`
}

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes and validates a configuration. Unknown keys are
// errors, so that a misspelt key is not silently ignored.
func ParseConfig(b []byte) (*Config, error) {
	c, err := DecodeConfig(b)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// DecodeConfig decodes a configuration (unknown keys are errors) without
// validating it: for a caller that completes it first, then calls
// Validate.
func DecodeConfig(b []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks a configuration as ParseConfig does; call it again after
// changing one (gvs-switchd's -node-name and -node-ip flags).
func (c *Config) Validate() error {
	if c.AfterHandoff != "" && c.AfterHandoff != "exit" && c.AfterHandoff != "wait" {
		return fmt.Errorf("afterHandoff %q: want exit or wait", c.AfterHandoff)
	}
	if c.Queues < 0 || c.Queues > MaxQueues {
		return fmt.Errorf("queues: %d out of range 0..%d", c.Queues, MaxQueues)
	}
	if c.VXLANReaders < 0 || c.VXLANReaders > MaxQueues {
		return fmt.Errorf("vxlanReaders: %d out of range 0..%d", c.VXLANReaders, MaxQueues)
	}
	if c.VXLANFlowQueues < 0 || c.VXLANFlowQueues > vxlan.MaxFlowQueues {
		return fmt.Errorf("vxlanFlowQueues: %d out of range 0..%d", c.VXLANFlowQueues, vxlan.MaxFlowQueues)
	}
	if c.GoMaxProcs < 0 || c.GoMaxProcs > MaxGoMaxProcs {
		return fmt.Errorf("goMaxProcs: %d out of range 0..%d", c.GoMaxProcs, MaxGoMaxProcs)
	}
	if c.RxBufferBudgetMiB < -1 || c.RxBufferBudgetMiB > MaxRxBufferBudgetMiB {
		return fmt.Errorf("rxBufferBudgetMiB: %d out of range -1 (no bound), 0 (default) or 1..%d", c.RxBufferBudgetMiB, MaxRxBufferBudgetMiB)
	}
	if _, err := c.vnidWait(); err != nil {
		return err
	}
	if _, err := c.trimIdle(); err != nil {
		return err
	}
	if _, _, err := c.ioEngine(); err != nil {
		return err
	}
	if _, err := c.socketPolicy(); err != nil {
		return err
	}
	if err := c.validateCNIInstall(); err != nil {
		return err
	}
	if _, _, err := c.egressDNS(); err != nil {
		return err
	}
	if _, err := c.ipfixConfig(); err != nil {
		return err
	}
	if c.TraceAddr != "" && c.TraceAddr != "off" {
		if c.traceTLS().IsZero() {
			return errors.New("traceAddr needs traceTLS or etcdTLS: the trace endpoint serves with the node's certificate of the cluster CA")
		}
		if _, _, err := net.SplitHostPort(c.TraceAddr); err != nil {
			return fmt.Errorf("traceAddr: %w", err)
		}
	}
	if c.FromKubernetes() {
		if c.FromRegistry() {
			return errors.New("kubeconfig and etcdEndpoints: follow one control plane, not both")
		}
		if !master.ValidNodeName(c.NodeName) {
			return fmt.Errorf("nodeName %q: %w", c.NodeName, master.ErrInvalidNodeName)
		}
		if _, err := netip.ParseAddr(c.NodeIP); err != nil {
			return fmt.Errorf("nodeIP: %w", err)
		}
		return nil
	}
	if c.FromRegistry() {
		if err := (&registry.DialConfig{Endpoints: c.EtcdEndpoints, Insecure: c.EtcdInsecure}).CheckEndpoints(); err != nil {
			return err
		}
		if !c.EtcdInsecure && c.EtcdTLS.IsZero() {
			return errors.New("etcdTLS (caFile, certFile, keyFile) is required with etcdEndpoints; etcdInsecure allows plain text (lab use only)")
		}
		if !master.ValidNodeName(c.NodeName) {
			return fmt.Errorf("nodeName %q: %w", c.NodeName, master.ErrInvalidNodeName)
		}
		// The rest comes from the registry; check what must be here.
		if _, err := netip.ParseAddr(c.NodeIP); err != nil {
			return fmt.Errorf("nodeIP: %w", err)
		}
		if c.NodeName == "" {
			return errors.New("nodeName is required with etcdEndpoints")
		}
		return nil
	}
	if _, err := c.Node(); err != nil {
		return err
	}
	return nil
}

// Node converts the node part of the configuration to the rule program's
// NodeConfig, validating it.
func (c *Config) Node() (sdn.NodeConfig, error) {
	var n sdn.NodeConfig
	var errs []error
	n.NodeName = c.NodeName
	var err error
	if n.NodeIP, err = netip.ParseAddr(c.NodeIP); err != nil {
		errs = append(errs, fmt.Errorf("nodeIP: %w", err))
	}
	if n.Subnet, err = netip.ParsePrefix(c.Subnet); err != nil {
		errs = append(errs, fmt.Errorf("subnet: %w", err))
	}
	for _, s := range c.ClusterNetworks {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("clusterNetworks: %w", err))
			continue
		}
		n.ClusterNetworks = append(n.ClusterNetworks, p)
	}
	if n.ServiceNetwork, err = netip.ParsePrefix(c.ServiceNetwork); err != nil {
		errs = append(errs, fmt.Errorf("serviceNetwork: %w", err))
	}
	if n.Mode, err = sdn.ParseMode(c.Mode); err != nil {
		errs = append(errs, err)
	}
	n.MTU = c.MTU
	if n.MTU == 0 {
		n.MTU = 1450
	}
	if len(errs) > 0 {
		return n, errors.Join(errs...)
	}
	if err := n.Validate(); err != nil {
		return n, err
	}
	return n, nil
}
