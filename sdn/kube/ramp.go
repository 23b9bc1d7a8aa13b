package kube

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// assignSubnet gives a subnet to a HostSubnet an administrator made for a
// host that is not a node (OpenShift's F5 "ramp"): it has the assign-subnet
// annotation and no subnet (networkv1.WantsSubnet). The subnet comes from
// the allocator the nodes' come from, and is held under the HostSubnet's
// name, so deleting the HostSubnet releases it (syncNode). The object is
// updated in place, the annotation removed, as OpenShift's master does
// (OpenShift deletes and re-creates it: its validation forbids an empty
// subnet on update; gvs's CRD allows it). A HostSubnet it cannot serve is
// logged and left as it is, without a subnet, so that no node routes to
// it: an unparsable fixed-vnid-host (treating the host as a node would let
// it speak as any project), a hostIP that is not a unicast IPv4 address,
// or one another HostSubnet has.
func (c *controller) assignSubnet(ctx context.Context, hs *networkv1.HostSubnet) error {
	name := hs.Name
	if _, _, err := networkv1.FixedVNID(hs); err != nil {
		c.log.Error("master: HostSubnet refused; no subnet assigned", "hostsubnet", name, "err", err)
		return nil
	}
	ip, err := netip.ParseAddr(hs.HostIP)
	if err != nil || !ip.Is4() || !ip.IsGlobalUnicast() {
		c.log.Error("master: HostSubnet refused: hostIP is not a unicast IPv4 address; no subnet assigned", "hostsubnet", name, "hostIP", hs.HostIP)
		return nil
	}
	if other := c.hostIPHolder(name, ip); other != "" {
		c.log.Error("master: HostSubnet refused: its hostIP is another HostSubnet's; no subnet assigned", "hostsubnet", name, "hostIP", ip, "holder", other)
		return nil
	}
	p, ok := c.held[name]
	if !ok {
		if p, err = c.subnets.Allocate(); err != nil {
			return fmt.Errorf("HostSubnet %s: %w", name, err)
		}
		c.held[name] = p // kept across a failed update; released with the object
	}
	upd := hs.DeepCopy()
	upd.Subnet = p.String()
	if upd.Host == "" {
		upd.Host = name
	}
	delete(upd.Annotations, networkv1.AssignSubnetAnnotation)
	if _, err := c.m.net.HostSubnets().Update(ctx, upd); err != nil {
		return ignoreConflict(err)
	}
	vnid, fixed, _ := networkv1.FixedVNID(hs)
	c.log.Info("assigned a subnet to a host that is not a node", "hostsubnet", name, "hostIP", ip, "subnet", p, "fixed VNID", fixed, "vnid", vnid)
	return nil
}
