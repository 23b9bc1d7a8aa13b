package daemon

import (
	"errors"
	"net/netip"

	"github.com/gvswitch/gvs/sdn"
)

// nodeState (node.go) is the node a source of cluster state drives
// (internal/daemon/source.Sink): remote nodes and project VNIDs go to the
// rule program; a subnet change (subnet.go) also detaches pods, moves tun0
// and marks CNI leases stale.

// AddRemote installs the rules for a remote node and accepts its VXLAN.
func (n *nodeState) AddRemote(rn sdn.RemoteNode) error { return n.prog.AddRemote(rn) }

// RemoveRemote removes a remote node's rules and stops accepting its
// VXLAN. Removing an unknown node is not an error.
func (n *nodeState) RemoveRemote(ip netip.Addr) error { return n.prog.RemoveRemote(ip) }

// SetProjectVNID records a project's VNID and re-tags the project's local
// pods (sdn/node Program.SetProjectVNID).
func (n *nodeState) SetProjectVNID(project string, vnid uint32) error {
	moved, err := n.prog.SetProjectVNID(project, vnid)
	for _, p := range moved {
		n.log.Info("pod re-tagged", "pod", p.Name, "project", project, "from", p.VNID, "to", vnid)
	}
	return errors.Join(err, n.syncEgressHost(false)) // an egress IP follows its project's VNID
}

// SetMulticast opts a project in to multicast or out (sdn/node
// Program.SetMulticast).
func (n *nodeState) SetMulticast(project string, on bool) error {
	if err := n.prog.SetMulticast(project, on); err != nil {
		return err
	}
	n.log.Info("project multicast", "project", project, "enabled", on)
	return nil
}

// SetService installs or replaces a service's table 60 rules
// (internal/daemon/source.ServiceSink): in multitenant mode only its own
// project's pods reach it.
func (n *nodeState) SetService(svc sdn.Service) error { return n.prog.SetService(svc) }

// DeleteService removes a service's table 60 rules.
func (n *nodeState) DeleteService(namespace, name string) error {
	return n.prog.DeleteService(namespace, name)
}
