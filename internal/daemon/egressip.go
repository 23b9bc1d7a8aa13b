package daemon

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/nat"
)

// egressHost is the host side of the egress IPs this node hosts: the
// addresses on the underlay link and the nftables tables that source-NAT
// the hosted VNIDs' traffic (sdn/nat EnsureEgressIPs). It follows the
// rule program (node.Program.HostedEgressIPs) after every change. Until
// tun0 exists (Daemon.setup) it installs nothing; frames the switch
// addresses to an egress MAC meanwhile are dropped by the kernel, never
// masqueraded.
//
// What survives the daemon: on a handoff to a successor, everything (the
// successor's first change replaces it); on a plain stop, the addresses
// are removed (a stopped node must not answer ARP for an egress IP that
// may move) and so are the tables (release). A daemon starting finds the
// addresses of a previous run by their label and removes those it does not
// host on its first sync.
type egressHost struct {
	mu     sync.Mutex
	ready  bool
	hosted map[netip.Addr]uint32 // installed
}

// SetEgressIPs sets a project's egress IPs (source.EgressIPSink): the
// rule program's route first, then the host side.
func (n *nodeState) SetEgressIPs(project string, hosts []sdn.EgressIPHost) error {
	err := n.prog.SetEgressIPs(project, hosts)
	return errors.Join(err, n.syncEgressHost(false))
}

// syncEgressHost makes the host side match the program's hosted egress IPs
// (force: even when nothing changed, as at start).
func (n *nodeState) syncEgressHost(force bool) error {
	h := &n.eipHost
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ready || n.prog == nil {
		return nil
	}
	want := n.prog.HostedEgressIPs()
	if !force && maps.Equal(want, h.hosted) {
		return nil
	}
	cfg := n.prog.Node()
	var ips []nat.EgressIP
	for _, ip := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		ips = append(ips, nat.EgressIP{IP: ip, MAC: sdn.EgressMAC(want[ip]), Mark: sdn.EgressMark(want[ip])})
	}
	err := nat.EnsureEgressIPs("tun0", cfg.ClusterNetworks, cfg.ServiceNetwork, ips)
	if err == nil {
		err = nat.SetEgressAddresses(cfg.NodeIP, slices.Collect(maps.Keys(want)))
	}
	if err != nil {
		n.log.Error("egress IPs: host side", "hosted", len(ips), "err", err)
		return err
	}
	h.hosted = want
	n.log.Info("egress IPs hosted", "count", len(ips))
	return nil
}

// startEgressHost marks tun0 ready and installs the host side of what the
// program holds, removing what a previous run left (Daemon.setup).
func (n *nodeState) startEgressHost() error {
	n.eipHost.mu.Lock()
	n.eipHost.ready = true
	n.eipHost.mu.Unlock()
	return n.syncEgressHost(true)
}

// releaseEgressHost removes the egress IP addresses and tables: the
// daemon stops without a successor.
func (n *nodeState) releaseEgressHost() {
	h := &n.eipHost
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ready || n.prog == nil {
		return
	}
	h.ready = false
	cfg := n.prog.Node()
	err := errors.Join(nat.SetEgressAddresses(cfg.NodeIP, nil),
		nat.EnsureEgressIPs("tun0", cfg.ClusterNetworks, cfg.ServiceNetwork, nil))
	if err != nil {
		n.log.Warn("egress IPs: release", "err", err)
	}
	h.hosted = nil
}
