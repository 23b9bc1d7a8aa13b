// Package source names what a source of cluster state drives on a node.
// gvs-switchd has two sources: the etcd registry (internal/daemon/etcdsource,
// the default) and, beside it, a Kubernetes API server; both mirror the same
// state into the node through Sink, so the rest of the daemon does not know
// which one it follows.
package source

import (
	"net/netip"

	"github.com/gvswitch/gvs/sdn"
)

// Sink is the node as a source sees it. A source calls it from its own
// goroutines, one call at a time.
type Sink interface {
	// AddRemote installs or updates a remote node (its subnet is routed to
	// it, its VXLAN accepted).
	AddRemote(sdn.RemoteNode) error
	// RemoveRemote removes a remote node; an unknown one is not an error.
	RemoveRemote(ip netip.Addr) error
	// SetProjectVNID records a project's VNID and re-tags its local pods.
	SetProjectVNID(project string, vnid uint32) error
	// ChangeSubnet moves the node to another subnet (an invalid one: none).
	ChangeSubnet(netip.Prefix) error
}

// Labels is what NetworkPolicy selects on: a source that knows pod and
// namespace labels (Kubernetes: the API server; etcd: set with gvsctl)
// drives a LabelSink beside the Sink. A nil map removes the object.
type LabelSink interface {
	// SetNamespaceLabels records a namespace's (project's) labels.
	SetNamespaceLabels(namespace string, labels map[string]string) error
	// SetPodLabels records the labels of pod name in namespace, and its
	// address when known (invalid: not yet), for pods on any node.
	SetPodLabels(namespace, name string, ip netip.Addr, labels map[string]string) error
}

// ServiceSink receives Services, for the multitenant table 60 (a pod
// reaches only its own project's services and the global projects').
// Kubernetes has them; in the etcd registry an administrator sets them
// with gvsctl. The node takes a service's VNID from its project.
type ServiceSink interface {
	// SetService installs or replaces a service (by namespace and name).
	SetService(sdn.Service) error
	// DeleteService removes one; an unknown one is not an error.
	DeleteService(namespace, name string) error
}
