package networkv1

import (
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// The deep copies are written out by hand (there is no code generator in
// this module). Every slice and pointer field is copied; a test fills every
// field and checks that the copy shares no memory with the original.

func copyUint32(p *uint32) *uint32 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// DeepCopyInto copies c into out.
func (c *ClusterNetwork) DeepCopyInto(out *ClusterNetwork) {
	*out = *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.ClusterNetworks = slices.Clone(c.ClusterNetworks)
	out.VXLANPort = copyUint32(c.VXLANPort)
	out.MTU = copyUint32(c.MTU)
}

// DeepCopy returns a deep copy of c.
func (c *ClusterNetwork) DeepCopy() *ClusterNetwork {
	if c == nil {
		return nil
	}
	out := new(ClusterNetwork)
	c.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (c *ClusterNetwork) DeepCopyObject() runtime.Object { return c.DeepCopy() }

// DeepCopyInto copies l into out.
func (l *ClusterNetworkList) DeepCopyInto(out *ClusterNetworkList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = copyItems(l.Items, (*ClusterNetwork).DeepCopyInto)
}

// DeepCopy returns a deep copy of l.
func (l *ClusterNetworkList) DeepCopy() *ClusterNetworkList {
	if l == nil {
		return nil
	}
	out := new(ClusterNetworkList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *ClusterNetworkList) DeepCopyObject() runtime.Object { return l.DeepCopy() }

// DeepCopyInto copies h into out.
func (h *HostSubnet) DeepCopyInto(out *HostSubnet) {
	*out = *h
	h.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.EgressIPs = slices.Clone(h.EgressIPs)
	out.EgressCIDRs = slices.Clone(h.EgressCIDRs)
}

// DeepCopy returns a deep copy of h.
func (h *HostSubnet) DeepCopy() *HostSubnet {
	if h == nil {
		return nil
	}
	out := new(HostSubnet)
	h.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (h *HostSubnet) DeepCopyObject() runtime.Object { return h.DeepCopy() }

// DeepCopyInto copies l into out.
func (l *HostSubnetList) DeepCopyInto(out *HostSubnetList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = copyItems(l.Items, (*HostSubnet).DeepCopyInto)
}

// DeepCopy returns a deep copy of l.
func (l *HostSubnetList) DeepCopy() *HostSubnetList {
	if l == nil {
		return nil
	}
	out := new(HostSubnetList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *HostSubnetList) DeepCopyObject() runtime.Object { return l.DeepCopy() }

// DeepCopyInto copies n into out.
func (n *NetNamespace) DeepCopyInto(out *NetNamespace) {
	*out = *n
	n.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.EgressIPs = slices.Clone(n.EgressIPs)
}

// DeepCopy returns a deep copy of n.
func (n *NetNamespace) DeepCopy() *NetNamespace {
	if n == nil {
		return nil
	}
	out := new(NetNamespace)
	n.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (n *NetNamespace) DeepCopyObject() runtime.Object { return n.DeepCopy() }

// DeepCopyInto copies l into out.
func (l *NetNamespaceList) DeepCopyInto(out *NetNamespaceList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = copyItems(l.Items, (*NetNamespace).DeepCopyInto)
}

// DeepCopy returns a deep copy of l.
func (l *NetNamespaceList) DeepCopy() *NetNamespaceList {
	if l == nil {
		return nil
	}
	out := new(NetNamespaceList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *NetNamespaceList) DeepCopyObject() runtime.Object { return l.DeepCopy() }

// DeepCopyInto copies e into out.
func (e *EgressNetworkPolicy) DeepCopyInto(out *EgressNetworkPolicy) {
	*out = *e
	e.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Egress = slices.Clone(e.Spec.Egress) // rules hold only strings
}

// DeepCopy returns a deep copy of e.
func (e *EgressNetworkPolicy) DeepCopy() *EgressNetworkPolicy {
	if e == nil {
		return nil
	}
	out := new(EgressNetworkPolicy)
	e.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (e *EgressNetworkPolicy) DeepCopyObject() runtime.Object { return e.DeepCopy() }

// DeepCopyInto copies l into out.
func (l *EgressNetworkPolicyList) DeepCopyInto(out *EgressNetworkPolicyList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = copyItems(l.Items, (*EgressNetworkPolicy).DeepCopyInto)
}

// DeepCopy returns a deep copy of l.
func (l *EgressNetworkPolicyList) DeepCopy() *EgressNetworkPolicyList {
	if l == nil {
		return nil
	}
	out := new(EgressNetworkPolicyList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *EgressNetworkPolicyList) DeepCopyObject() runtime.Object { return l.DeepCopy() }

// copyItems deep-copies a list's items; nil stays nil.
func copyItems[T any](in []T, deepCopyInto func(*T, *T)) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for i := range in {
		deepCopyInto(&in[i], &out[i])
	}
	return out
}
