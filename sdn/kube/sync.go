package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/master"
)

// The syncs are level-triggered: each looks at a name's objects in the
// informers' caches and at the allocators, and makes the API agree. A
// cache may lag behind the master's own writes, so every write tolerates
// finding its work already done (AlreadyExists, NotFound, Conflict), and
// a NetNamespace whose netid disagrees with the allocator is read again
// from the API server before the allocator believes it.

// syncProject makes a Namespace's NetNamespace exist with the VNID the
// allocator holds for it, applies a change-network annotation, and deletes
// the NetNamespace (releasing the VNID) of a Namespace that is gone.
func (c *controller) syncProject(ctx context.Context, name string) error {
	if c.vnids == nil {
		return nil // subnet mode: no NetNamespaces
	}
	netnses := c.m.net.NetNamespaces()
	ns := getObj[corev1.Namespace](c.nsInf, name)
	netns := getObj[networkv1.NetNamespace](c.netnsInf, name)
	if ns == nil {
		if netns != nil {
			if err := netnses.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if vnid, ok := c.vnids.Get(name); ok {
			_ = c.vnids.Delete(name)
			c.log.Info("namespace gone; NetNamespace deleted", "namespace", name, "netid", vnid, "netid in use", c.vnids.InUse(vnid))
		}
		return nil
	}
	vnid, ok := c.vnids.Get(name)
	if !ok {
		if netns != nil {
			// Made by someone else since the rebuild: the object wins.
			c.vnids.Load(name, netns.NetID)
			vnid = netns.NetID
		} else {
			var err error
			if vnid, err = c.vnids.Create(name); err != nil {
				return err
			}
			c.log.Info("allocated a netid", "namespace", name, "netid", vnid)
		}
	}
	if netns == nil {
		obj := &networkv1.NetNamespace{ObjectMeta: metav1.ObjectMeta{Name: name}, NetName: name, NetID: vnid}
		_, err := netnses.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			return c.adoptNetID(ctx, name, vnid)
		}
		if err == nil {
			c.log.Info("created the NetNamespace", "namespace", name, "netid", vnid)
		}
		return err
	}
	if v, ok := netns.Annotations[networkv1.ChangePodNetworkAnnotation]; ok {
		return c.changeNetwork(ctx, netns, v)
	}
	if netns.NetID != vnid {
		return c.adoptNetID(ctx, name, vnid)
	}
	return nil
}

// adoptNetID reads a NetNamespace from the API server and, if its netid
// differs from the allocator's (changed by hand, or made by someone else),
// records the object's netid: the object is what the nodes follow.
func (c *controller) adoptNetID(ctx context.Context, name string, vnid uint32) error {
	live, err := c.m.net.NetNamespaces().Get(ctx, name)
	if err != nil {
		return err
	}
	if _, pending := live.Annotations[networkv1.ChangePodNetworkAnnotation]; pending || live.NetID == vnid {
		return nil // the cache lagged; the next event brings the object
	}
	c.log.Warn("NetNamespace netid changed outside gvs-master; recorded", "namespace", name, "netid", live.NetID, "was", vnid)
	c.vnids.Load(name, live.NetID)
	return nil
}

// changeNetwork applies a change-network annotation and removes it in the
// same update, as OpenShift's master does. An annotation that cannot be
// applied (unparsable, unknown project, isolating default) is left in
// place and logged, so `oc adm pod-network`, which waits for its removal,
// reports a failure; in networkpolicy mode, where OpenShift forbids
// renumbering, it is removed unapplied.
func (c *controller) changeNetwork(ctx context.Context, netns *networkv1.NetNamespace, value string) error {
	name := netns.Name
	upd := netns.DeepCopy()
	delete(upd.Annotations, networkv1.ChangePodNetworkAnnotation)
	if c.net.Mode.Canonical() != sdn.ModeMultitenant {
		c.log.Error("change-network refused: the plugin does not allow renumbering", "namespace", name, "value", value, "mode", c.net.Mode.Short())
		_, err := c.m.net.NetNamespaces().Update(ctx, upd)
		return ignoreConflict(err)
	}
	old, _ := c.vnids.Get(name)
	if err := applyChange(c.vnids, name, value); err != nil {
		c.log.Error("change-network not applied; annotation left in place", "namespace", name, "value", value, "err", err)
		return nil
	}
	upd.NetID, _ = c.vnids.Get(name)
	if _, err := c.m.net.NetNamespaces().Update(ctx, upd); err != nil {
		c.vnids.Load(name, old) // undo: the object still has the old netid
		return ignoreConflict(err)
	}
	c.log.Info("change-network applied", "namespace", name, "value", value, "netid", upd.NetID, "was", old)
	return nil
}

// applyChange applies a change-network annotation's value to project in v.
func applyChange(v *master.VNIDs, project, value string) error {
	cn, err := networkv1.ParseChangeNetwork(value)
	if err != nil {
		return err
	}
	switch cn.Action {
	case networkv1.ActionGlobal:
		return v.MakeGlobal(project)
	case networkv1.ActionIsolate:
		return v.Isolate(project)
	case networkv1.ActionJoin:
		return v.Join(cn.Project, project)
	}
	return fmt.Errorf("%w: %q", networkv1.ErrInvalidChangeNetwork, value)
}

// ignoreConflict turns a 409 into a retry-free nil: the object changed
// since the cache saw it, and its update event queues the name again.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// syncNode makes a Node's HostSubnet exist with the subnet held for it and
// the Node's InternalIP as hostIP, and deletes (releasing the subnet) the
// HostSubnet of a Node that is gone or was replaced by another of the
// same name. A HostSubnet without the node-UID annotation was made by
// hand: for a Node it is adopted (the annotation stamped); without a Node
// (OpenShift's F5 case) its subnet stays held and it is left alone. One
// that asks for a subnet (the assign-subnet annotation) gets one first
// (assignSubnet).
func (c *controller) syncNode(ctx context.Context, name string) error {
	hss := c.m.net.HostSubnets()
	node := getObj[corev1.Node](c.nodeInf, name)
	hs := getObj[networkv1.HostSubnet](c.hsInf, name)
	if hs != nil && networkv1.WantsSubnet(hs) {
		return c.assignSubnet(ctx, hs) // a host that is not a node (ramp.go)
	}
	if hs != nil && hs.Annotations[networkv1.NodeUIDAnnotation] == "" {
		if _, ok := c.held[name]; !ok {
			if err := c.hold(hs); err != nil {
				c.log.Error("master: manual HostSubnet not usable", "hostsubnet", name, "subnet", hs.Subnet, "err", err)
				return nil
			}
		}
		if node == nil {
			return nil // no Node: OpenShift's F5 case, left alone
		}
		// Made by hand for a Node (to choose its subnet): adopt it, as
		// OpenShift does, by stamping the Node's UID on it.
		upd := hs.DeepCopy()
		if upd.Annotations == nil {
			upd.Annotations = map[string]string{}
		}
		upd.Annotations[networkv1.NodeUIDAnnotation] = string(node.UID)
		if _, err := hss.Update(ctx, upd); err != nil {
			return ignoreConflict(err)
		}
		c.log.Info("adopted a HostSubnet made by hand", "node", name, "subnet", hs.Subnet)
		return nil // its update event brings it back here
	}
	if hs != nil && (node == nil || hs.Annotations[networkv1.NodeUIDAnnotation] != string(node.UID)) {
		if err := hss.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		c.log.Info("node gone; HostSubnet deleted", "node", name, "subnet", hs.Subnet)
		c.release(name)
		hs = nil
	}
	if node == nil {
		c.release(name) // its HostSubnet may be gone already
		return nil
	}
	ip := InternalIP(node)
	if !ip.IsValid() {
		c.log.Warn("node has no IPv4 InternalIP yet; no HostSubnet", "node", name)
		return nil
	}
	if other := c.hostIPHolder(name, ip); other != "" {
		// A node's kubelet may write its own Node's status: two HostSubnets
		// with one hostIP would make every node replace one's routes with
		// the other's (their rules are keyed by the address). The address
		// stays with the node that has it; this one keeps its old hostIP,
		// or gets no HostSubnet, until it stops claiming it.
		c.log.Error("master: node's InternalIP is another node's hostIP; refused", "node", name, "ip", ip, "holder", other)
		return nil
	}
	if hs != nil {
		if _, ok := c.held[name]; !ok {
			if err := c.hold(hs); err != nil {
				// Unusable (a duplicate, say): replace it.
				c.log.Error("master: HostSubnet not usable; replacing it", "node", name, "subnet", hs.Subnet, "err", err)
				if err := hss.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
				hs = nil
			}
		}
	}
	if hs == nil {
		return c.createHostSubnet(ctx, node, ip)
	}
	if held := c.held[name]; hs.Subnet != held.String() {
		// Changed by hand: the object is what the nodes follow.
		c.release(name)
		if err := c.hold(hs); err != nil {
			return fmt.Errorf("HostSubnet %s changed to %s: %w", name, hs.Subnet, err)
		}
		c.log.Warn("HostSubnet subnet changed outside gvs-master; recorded", "node", name, "subnet", hs.Subnet, "was", held)
	}
	if hs.HostIP != ip.String() || hs.Host != name {
		upd := hs.DeepCopy()
		upd.Host, upd.HostIP = name, ip.String()
		if _, err := hss.Update(ctx, upd); err != nil {
			return ignoreConflict(err)
		}
		c.log.Info("HostSubnet hostIP updated", "node", name, "hostIP", ip, "was", hs.HostIP)
	}
	return nil
}

// hostIPHolder returns the name of another HostSubnet whose hostIP is ip,
// or "".
func (c *controller) hostIPHolder(name string, ip netip.Addr) string {
	for _, o := range c.hsInf.GetStore().List() {
		hs, ok := o.(*networkv1.HostSubnet)
		if ok && hs.Name != name && hs.HostIP == ip.String() {
			return hs.Name
		}
	}
	return ""
}

// createHostSubnet creates the HostSubnet of node, allocating a subnet
// unless one is held for it already (a create that failed, or a HostSubnet
// deleted by hand: it comes back with the same subnet).
func (c *controller) createHostSubnet(ctx context.Context, node *corev1.Node, ip netip.Addr) error {
	name := node.Name
	p, ok := c.held[name]
	if !ok {
		var err error
		if p, err = c.subnets.Allocate(); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		c.held[name] = p
	}
	obj := &networkv1.HostSubnet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{networkv1.NodeUIDAnnotation: string(node.UID)}},
		Host:       name,
		HostIP:     ip.String(),
		Subnet:     p.String(),
	}
	_, err := c.m.net.HostSubnets().Create(ctx, obj)
	switch {
	case apierrors.IsAlreadyExists(err):
		return errors.New("HostSubnet exists but is not in the cache yet") // retried once the cache has it
	case err != nil:
		return err
	}
	c.log.Info("created the HostSubnet", "node", name, "hostIP", obj.HostIP, "subnet", p)
	return nil
}
