// Package cluster brings up a gvs cluster on a lab topology (package
// lab): one gvs-switchd per node namespace, configured with the node's
// subnet, its peers and its pods. The demo, the end-to-end tests and
// gvs-bench use it.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/ovs"
	"github.com/gvswitch/gvs/sdn/pki"
)

// Spec describes a cluster. The zero values of the network fields give
// OpenShift's defaults.
type Spec struct {
	Lab lab.Spec
	// Mode is "subnet", "multitenant" or "networkpolicy" (Kubernetes mode only).
	Mode string
	// VNIDs maps projects to VNIDs; "default" is always 0.
	VNIDs map[string]uint32
	// ClusterNetwork is the pod network (default 10.128.0.0/14), cut into
	// node subnets of HostSubnetBits host bits (default 9, i.e. /23).
	ClusterNetwork netip.Prefix
	HostSubnetBits int
	// ServiceNetwork defaults to 172.30.0.0/16.
	ServiceNetwork netip.Prefix
	// BinDir holds gvs-switchd and gvsctl.
	BinDir string
	// Dataplanes gives each node's dataplane, DataplaneGVS (the default) or
	// DataplaneKernel; nodes past the end of the list run gvs.
	Dataplanes []string
	// ControlPlane is "" (static peers and VNIDs in each node's config),
	// ControlPlaneEmbedded or ControlPlaneExternal (controlplane.go).
	ControlPlane string
	// NodeLeaseTTL is the control plane's node lease in seconds (default 5).
	NodeLeaseTTL int
	// MasterArgs are extra gvs-master flags (e.g. --create-projects=false).
	MasterArgs []string
	// CNI makes the daemons serve CNI (cni.go) and attaches the pods with
	// real CNI ADD calls through libcni and gvs-cni instead of listing them
	// in the daemons' configurations. TapPool is the daemons' tapPool.
	CNI     bool
	TapPool int
	// Queues and VXLANReaders are the daemons' queues and vxlanReaders
	// settings (queues of pod TAPs, receive sockets of vxlan0); 0 leaves
	// them out.
	Queues       int
	VXLANReaders int
	// FlowQueues is the daemons' vxlanFlowQueues (0: the default).
	FlowQueues int
	// GoMaxProcs is the daemons' goMaxProcs (0: the default).
	GoMaxProcs int
	// ConntrackMax is the daemons' conntrackMax (0: the default).
	ConntrackMax int
	// IOEngine is the daemons' ioEngine ("": the default, auto).
	IOEngine string
	// SchedSlice and SchedSliceWhen are the daemons' schedSlice and
	// schedSliceWhen ("": the defaults).
	SchedSlice, SchedSliceWhen string
	// BusyPoll is the daemons' busyPoll ("": the default).
	BusyPoll string
	// Configure, if set, adjusts node i's daemon configuration last.
	Configure func(c *Cluster, i int, cfg *daemon.Config)
}

// Cluster is a running cluster.
type Cluster struct {
	Spec  Spec
	Lab   *lab.Lab
	Nodes []Node
	// Control plane (Spec.ControlPlane), running in the first node's namespace.
	Master        *lab.Proc
	masterArgs    []string
	EtcdEndpoints []string
	Etcd          []*EtcdMember
	// Kube is the API server of ControlPlaneKube; KubeAdmin an
	// administrator's kubeconfig for processes in the first node's
	// namespace; kubeNode the daemons' (gvs-node's ServiceAccount).
	Kube      *kubetest.Server
	KubeAdmin string
	kubeNode  string
}

// Node is one node of the cluster and its daemon.
type Node struct {
	lab.Node
	Subnet netip.Prefix
	Socket string
	Config string
	Pods   []Pod
	proc   *lab.Proc
	// procs are the processes of a non-gvs dataplane (OVS), if any.
	procs []*lab.Proc
	ovs   *ovs.Daemons // an OVS node's daemons, nil for the others
}

// Pod is a pod attached to a node.
type Pod struct {
	lab.Pod
	IP   netip.Addr
	VNID uint32
}

func (s *Spec) defaults() error {
	if s.Mode == "" {
		s.Mode = "multitenant"
	}
	if !s.ClusterNetwork.IsValid() {
		s.ClusterNetwork = netip.MustParsePrefix("10.128.0.0/14")
	}
	if s.HostSubnetBits == 0 {
		s.HostSubnetBits = 9
	}
	if !s.ServiceNetwork.IsValid() {
		s.ServiceNetwork = netip.MustParsePrefix("172.30.0.0/16")
	}
	if s.BinDir == "" {
		return errors.New("cluster: Spec.BinDir is required (where gvs-switchd and gvsctl are)")
	}
	if _, err := os.Stat(filepath.Join(s.BinDir, "gvs-switchd")); err != nil {
		return fmt.Errorf("cluster: %w (run make build)", err)
	}
	return nil
}

// nodeSubnet returns the i-th node subnet (sequential; the control plane
// will allocate them instead).
func (s *Spec) nodeSubnet(i int) netip.Prefix {
	if s.ControlPlane != "" {
		return s.allocatedSubnet(i)
	}
	bits := 32 - s.HostSubnetBits
	base := s.ClusterNetwork.Addr().As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(i) << s.HostSubnetBits
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
}

// Up creates the lab and starts a daemon per node. On failure it tears down
// what it made.
func Up(ctx context.Context, spec Spec) (_ *Cluster, err error) {
	if err := spec.defaults(); err != nil {
		return nil, err
	}
	l, err := lab.Create(ctx, spec.Lab)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Spec: spec, Lab: l}
	defer func() {
		if err != nil {
			_ = c.Down()
		}
	}()
	for i, ln := range l.Nodes {
		n := Node{Node: ln, Subnet: spec.nodeSubnet(i)}
		n.Socket = filepath.Join(l.StateDir(), ln.Name+".sock")
		n.Config = filepath.Join(l.StateDir(), ln.Name+".json")
		for j, lp := range ln.Pods {
			ip := n.Subnet.Addr().Next().Next() // .1 is the gateway
			for k := 0; k < j; k++ {
				ip = ip.Next()
			}
			n.Pods = append(n.Pods, Pod{Pod: lp, IP: ip, VNID: spec.vnid(lp.Project)})
		}
		c.Nodes = append(c.Nodes, n)
	}
	if spec.ControlPlane != "" {
		if err := c.upControlPlane(ctx); err != nil {
			return nil, err
		}
	}
	for i := range c.Nodes {
		if err := c.writeConfig(i); err != nil {
			return nil, err
		}
	}
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if dp := spec.dataplane(i); dp != DataplaneGVS {
			if err := c.upOtherNode(ctx, i, dp); err != nil {
				return nil, err
			}
			continue
		}
		log := filepath.Join(l.StateDir(), n.Name+".log")
		n.proc, err = l.Start(ctx, n.NS, log, filepath.Join(spec.BinDir, "gvs-switchd"), "-config", n.Config)
		if err != nil {
			return nil, err
		}
		if spec.ControlPlane != "" { // one at a time: the order of registration gives the subnets
			if err := c.waitReady(ctx, i); err != nil {
				return nil, err
			}
		}
	}
	for i := range c.Nodes {
		if spec.dataplane(i) != DataplaneGVS {
			continue
		}
		if err := c.waitReady(ctx, i); err != nil {
			return nil, err
		}
	}
	if c.Kube != nil { // as the scheduler would, before the kubelet runs CNI
		if err := c.createKubePods(ctx); err != nil {
			return nil, err
		}
	}
	if spec.CNI {
		if err := c.attachPodsCNI(ctx); err != nil {
			return nil, err
		}
	}
	if c.Kube != nil { // as the kubelet would, after CNI
		if err := c.setKubePodIPs(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (s *Spec) vnid(project string) uint32 {
	if (s.Mode != "multitenant" && s.Mode != "networkpolicy") || project == "default" {
		return 0
	}
	return s.VNIDs[project]
}

func (c *Cluster) writeConfig(i int) error {
	n := &c.Nodes[i]
	off := false
	cfg := daemon.Config{
		NodeName:        n.Name,
		NodeIP:          n.IP.String(),
		Subnet:          n.Subnet.String(),
		Mode:            c.Spec.Mode,
		ClusterNetworks: []string{c.Spec.ClusterNetwork.String()},
		ServiceNetwork:  c.Spec.ServiceNetwork.String(),
		Projects:        c.Spec.VNIDs,
		ControlSocket:   n.Socket,
		HandoffSocket:   c.HandoffSocket(i),
		MetricsAddr:     "127.0.0.1:9101",
		Queues:          c.Spec.Queues,
		VXLANReaders:    c.Spec.VXLANReaders,
		VXLANFlowQueues: c.Spec.FlowQueues,
		GoMaxProcs:      c.Spec.GoMaxProcs,
		ConntrackMax:    c.Spec.ConntrackMax,
		IOEngine:        c.Spec.IOEngine,
		SchedSlice:      c.Spec.SchedSlice,
		SchedSliceWhen:  c.Spec.SchedSliceWhen,
		BusyPoll:        c.Spec.BusyPoll,
	}
	if c.Lab.External == nil {
		cfg.NAT = &off
	}
	for j, o := range c.Nodes {
		if j != i {
			cfg.Peers = append(cfg.Peers, daemon.PeerConfig{Name: o.Name, IP: o.IP.String(), Subnet: o.Subnet.String()})
		}
	}
	if c.Spec.CNI {
		cfg.CNISocket, cfg.StateDir, cfg.TapPool = c.CNISocket(i), c.CNIStateDir(i), c.Spec.TapPool
	}
	for _, p := range n.Pods {
		if c.Spec.CNI {
			break
		}
		cfg.Pods = append(cfg.Pods, daemon.PodConfig{Name: p.Name, Project: p.Project, Netns: p.NSPath, IP: p.IP.String()})
	}
	if c.Spec.ControlPlane == ControlPlaneKube {
		cfg.Subnet, cfg.Peers, cfg.Projects = "", nil, nil
		cfg.ClusterNetworks, cfg.ServiceNetwork, cfg.Mode = nil, "", ""
		cfg.Kubeconfig = c.kubeNode
		if c.Spec.CNI { // the daemon installs the plugin, as deploy/gvs-node.yaml's does
			cfg.CNIBinDir, cfg.CNIConfDir = filepath.Join(c.NodeCNIDir(i), "bin"), filepath.Join(c.NodeCNIDir(i), "net.d")
			cfg.CNIPlugin, _ = filepath.Abs(filepath.Join(c.Spec.BinDir, "gvs-cni"))
		}
	} else if c.Spec.ControlPlane != "" {
		cfg.Subnet, cfg.Peers, cfg.Projects = "", nil, nil
		cfg.EtcdEndpoints = c.EtcdEndpoints
		cfg.EtcdTLS = pki.Dir(c.NodeTLSDir(i)).Files("tls")
	}
	if c.Spec.Configure != nil {
		c.Spec.Configure(c, i, &cfg)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(n.Config, b, 0o644)
}

// waitReady waits until node i's daemon answers "show" or its process ends.
func (c *Cluster) waitReady(ctx context.Context, i int) error {
	n := &c.Nodes[i]
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := c.Ctl(ctx, i, "show")
		if err == nil {
			return nil
		}
		if n.proc.Exited() || time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), n.Name+".log"))
			return fmt.Errorf("cluster: gvs-switchd on %s did not come up: %v\n--- its log ---\n%s", n.Name, err, log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Ctl runs gvsctl against node i's daemon and returns its output.
func (c *Cluster) Ctl(ctx context.Context, i int, args ...string) ([]byte, error) {
	n := &c.Nodes[i]
	argv := append([]string{filepath.Join(c.Spec.BinDir, "gvsctl"), "-s", n.Socket}, args...)
	return c.Lab.Exec(ctx, n.NS, argv...)
}

// AllPods lists every pod of the cluster, node by node.
func (c *Cluster) AllPods() []Pod {
	var out []Pod
	for _, n := range c.Nodes {
		out = append(out, n.Pods...)
	}
	return out
}

// Down stops the daemons and removes the lab.
func (c *Cluster) Down() error {
	if c.Lab == nil {
		return nil
	}
	if c.Kube != nil {
		_ = c.Kube.Stop() // its processes are the lab's too: Destroy ends what is left
	}
	return c.Lab.Destroy()
}
