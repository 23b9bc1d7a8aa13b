package source

import (
	"context"
	"net/netip"

	"github.com/gvswitch/gvs/sdn"
)

// ControlPlane is a source of cluster state that gvs-switchd follows: the
// etcd registry (internal/daemon/etcdsource) or a Kubernetes API server
// (internal/daemon/kubesource). The node calls Start, makes its rule
// program from the Bootstrap, then Follow (once), WaitForSync in
// networkpolicy mode, and Close when it stops. A source does what more it
// can through the small interfaces below, found by type assertion.
type ControlPlane interface {
	// Start connects, waits for the cluster's configuration and this
	// node's subnet, and reads the projects' VNIDs.
	Start(ctx context.Context) (Bootstrap, error)
	// Follow starts mirroring the control plane into sink, through a
	// Mirror, until ctx ends or Close.
	Follow(ctx context.Context, sink Sink)
	// WaitForSync waits until Follow has delivered a first full listing
	// (every policy, pod and namespace there was), or ctx ends; it
	// reports which.
	WaitForSync(ctx context.Context) bool
	// Close stops following.
	Close()
}

// Bootstrap is what a control plane told the node at start.
type Bootstrap struct {
	Cluster Cluster
	// Subnet is the node's subnet.
	Subnet netip.Prefix
	// NodeIP is the node's underlay address as the control plane has it.
	NodeIP netip.Addr
	// Lost is the subnet the node had before a restart and that went to
	// another node meanwhile (invalid if none): its pods' CNI leases are
	// stale.
	Lost netip.Prefix
	// Projects are the projects' VNIDs.
	Projects map[string]uint32
}

// Cluster is the cluster-wide configuration a control plane publishes
// (gvs-master's registry.Config, OpenShift's ClusterNetwork "default").
// A zero field is one the control plane does not set.
type Cluster struct {
	ClusterNetworks []netip.Prefix
	ServiceNetwork  netip.Prefix
	Mode            sdn.Mode
	VXLANPort       uint16
}

// ProjectRequester is a control plane the node can ask for a project it
// has a pod of (the registry: gvs-master creates it, with a fresh VNID,
// or refuses).
type ProjectRequester interface {
	RequestProject(ctx context.Context, project string) error
}

// PodPublisher is a control plane the node publishes its pods' addresses
// to (the registry, for other nodes' NetworkPolicy peers).
type PodPublisher interface {
	// PublishPods starts publishing what local returns (addresses by
	// namespace/name); call it once, after Follow.
	PublishPods(local func() map[string]netip.Addr)
	// PodsChanged tells PublishPods that the local pods changed.
	PodsChanged()
}

// KeepAliver is a control plane that holds the node's registration on a
// lease: KeepAlive takes over renewing it once the node serves.
type KeepAliver interface {
	KeepAlive()
}
