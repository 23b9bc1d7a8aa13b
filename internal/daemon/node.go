package daemon

import (
	"log/slog"
	"net/netip"
	"sync"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/internal/daemon/pods"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/node"
)

// nodeState is the node as the control plane drives it: the one
// source.Sink the followers call (sink.go: remote nodes, VNIDs, services;
// labels.go: labels and NetworkPolicies; egressfw.go: egress firewalls;
// subnet.go: the subnet). It owns the rule program, the pods, and what the
// control plane told the node; the dataplane it programs is the Daemon's.
type nodeState struct {
	cfg *Config
	log *slog.Logger

	// prog, pods and vnids are made when the node's configuration is
	// complete: in New without a control plane, in Run after the
	// control plane's answer with one (Daemon.init).
	prog  *node.Program
	pods  *pods.Manager
	vnids *vnidWaiter

	labels  labels           // namespace and pod labels (labels.go)
	egress  *egressFirewalls // egress firewalls (egressfw.go)
	eipHost egressHost       // the egress IPs this node hosts (egressip.go)

	// mu guards the CNI address manager and the subnet history.
	mu     sync.Mutex
	ipam   *cniplugin.IPAM // nil without CNI
	subnet subnetHistory
}

// The node takes every call a control plane makes.
var _ source.Sink = (*nodeState)(nil)

// podAddresses returns the local pods' addresses by namespace/name, as
// the node publishes them in the registry (networkpolicy peers).
func (n *nodeState) podAddresses() map[string]netip.Addr {
	out := map[string]netip.Addr{}
	if n.pods == nil {
		return out
	}
	for _, p := range n.pods.List() {
		if p.Name != "" && p.Project != "" {
			out[p.Project+"/"+p.Name] = p.IP
		}
	}
	return out
}

// nodeConfig returns the node configuration, which a subnet change may
// replace while the daemon runs.
func (n *nodeState) nodeConfig() sdn.NodeConfig { return n.prog.Node() }
