// Package source is the control plane as a node follows it. gvs-switchd
// has two: the etcd registry (internal/daemon/etcdsource, the default) and
// a Kubernetes API server (internal/daemon/kubesource). Each is a
// ControlPlane that only translates its wire objects into the calls of a
// Mirror; the Mirror keeps the state, works out the difference and drives
// the node through one Sink, so the rest of the daemon does not know which
// one it follows.
package source

import (
	"context"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/netpol"
)

// Sink is the node as a source sees it: every part of the node's state a
// control plane drives. A follower that has no objects of a kind (the etcd
// registry has no Services from Kubernetes, say) simply makes no such
// calls; the node always takes them all. The Mirror calls it one call at a
// time.
type Sink interface {
	NetworkSink
	LabelSink
	PolicySink
	ServiceSink
	EgressFirewallSink
	MulticastSink
	EgressIPSink
}

// MulticastSink takes the projects' multicast opt-ins (OpenShift's
// NetNamespace annotation netnamespace.network.openshift.io/multicast-enabled,
// the registry's project record).
type MulticastSink interface {
	// SetMulticast opts a project in (on) or out; an unknown project is
	// recorded for when it comes.
	SetMulticast(project string, on bool) error
}

// NetworkSink is the cluster's shape as the node takes it: remote nodes,
// project VNIDs and its own subnet.
type NetworkSink interface {
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

// LabelSink takes what NetworkPolicy selects on: pod and namespace labels
// (Kubernetes: the API server's; the registry: what gvs-master and the
// nodes publish).
type LabelSink interface {
	// SetNamespaceLabels records a namespace's (project's) labels; nil
	// removes the namespace.
	SetNamespaceLabels(namespace string, labels map[string]string) error
	// SetPod records a pod's labels, address and named ports.
	SetPod(Pod) error
	// DeletePod forgets a pod; an unknown one is not an error.
	DeletePod(namespace, name string) error
}

// Pod is a pod as NetworkPolicy sees it: the node's own, or, in
// networkpolicy mode, any node's.
type Pod struct {
	Namespace, Name string
	// IP is its pod-network address (invalid: none yet, or on the host
	// network).
	IP     netip.Addr
	Labels map[string]string
	// Ports are its containers' named ports.
	Ports []netpol.NamedPort
}

// EgressFirewallSink receives egress firewalls (OpenShift's
// EgressNetworkPolicy, one per project), by namespace and object name.
type EgressFirewallSink interface {
	// SetEgressFirewall installs or replaces one; rules are in order, the
	// first match wins.
	SetEgressFirewall(namespace, name string, rules []EgressRule) error
	// DeleteEgressFirewall removes one; an unknown one is not an error.
	DeleteEgressFirewall(namespace, name string) error
}

// EgressRule is one rule of an egress firewall: allow or deny traffic to a
// CIDR or to the addresses a DNS name resolves to (exactly one is set).
type EgressRule struct {
	Allow   bool
	CIDR    netip.Prefix
	DNSName string
}

// PolicySink receives NetworkPolicies (networkpolicy mode).
type PolicySink interface {
	// SetPolicy installs or replaces a policy.
	SetPolicy(*networkingv1.NetworkPolicy) error
	// DeletePolicy removes one; an unknown one is not an error.
	DeletePolicy(namespace, name string) error
}

// PodBandwidther is a control plane that stores pods' bandwidth limits
// (Kubernetes: the Pod object's kubernetes.io/ingress-bandwidth and
// egress-bandwidth annotations); CNI ADD asks it when the runtime passed
// no bandwidth arguments (cniplugin.ServerConfig.PodBandwidth).
type PodBandwidther interface {
	PodBandwidth(ctx context.Context, namespace, name, uid string) (*cniplugin.Bandwidth, error)
}

// RemoteWaiter is a control plane that can tell when the remote nodes
// (and the projects' VNIDs and the services) it listed first have reached
// the sink: a daemon taking over from a running one waits for it before it
// forwards (internal/daemon, handoff.go).
type RemoteWaiter interface {
	// WaitForRemotes waits until they have, or ctx ends; it reports
	// which.
	WaitForRemotes(ctx context.Context) bool
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
