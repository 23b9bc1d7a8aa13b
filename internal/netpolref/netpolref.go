// Package netpolref is a reference evaluator of Kubernetes NetworkPolicy,
// written from the API's documentation and independent of gvs's compiler
// (sdn/netpol), for the truth tables that check the compiler and the
// dataplane against it: given the policies, the namespaces' labels and two
// pods, may the first open a connection to the second on a protocol and
// port? It also holds the cases of the upstream NetworkPolicy e2e suite
// (upstream.go).
package netpolref

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Pod is a pod as policies see it.
type Pod struct {
	Namespace, Name string
	IP              netip.Addr
	Labels          map[string]string
	Ports           []NamedPort
}

// NamedPort is a named container port.
type NamedPort struct {
	Name     string
	Protocol corev1.Protocol // "" is TCP
	Port     uint16
}

// Key is "namespace/name".
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

func selects(s *metav1.LabelSelector, l map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return false // the API server refuses such a selector
	}
	return sel.Matches(labels.Set(l))
}

// Types returns whether a policy applies to ingress and to egress: its
// policyTypes, or, when absent, Ingress, and Egress if it has egress
// rules.
func Types(np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	return slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress), slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
}

// peerAdmits reports whether other is one of peers of a policy of namespace ns.
func peerAdmits(ns string, peers []networkingv1.NetworkPolicyPeer, other Pod, nsLabels map[string]map[string]string) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		switch {
		case p.IPBlock != nil:
			cidr, err := netip.ParsePrefix(p.IPBlock.CIDR)
			in := err == nil && cidr.Contains(other.IP)
			for _, e := range p.IPBlock.Except {
				if ep, err := netip.ParsePrefix(e); err == nil && ep.Contains(other.IP) {
					in = false
				}
			}
			if in {
				return true
			}
		case p.NamespaceSelector == nil:
			if other.Namespace == ns && p.PodSelector != nil && selects(p.PodSelector, other.Labels) {
				return true
			}
		default:
			if selects(p.NamespaceSelector, nsLabels[other.Namespace]) && (p.PodSelector == nil || selects(p.PodSelector, other.Labels)) {
				return true
			}
		}
	}
	return false
}

// portAdmits reports whether ports admit proto/port on dst.
func portAdmits(ports []networkingv1.NetworkPolicyPort, dst Pod, proto corev1.Protocol, num uint16) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			for _, n := range dst.Ports {
				np := n.Protocol
				if np == "" {
					np = corev1.ProtocolTCP
				}
				if n.Name == p.Port.StrVal && np == proto && n.Port == num {
					return true
				}
			}
		default:
			end := p.Port.IntVal
			if p.EndPort != nil {
				end = *p.EndPort
			}
			if int32(num) >= p.Port.IntVal && int32(num) <= end {
				return true
			}
		}
	}
	return false
}

// Admits reports whether the policies let src open a connection to dst on
// proto/port in one direction: ingress (dst's policies admit src) or
// egress (src's policies let it reach dst). A pod no policy selects for
// the direction is not isolated there.
func Admits(pols []*networkingv1.NetworkPolicy, nsLabels map[string]map[string]string, src, dst Pod, proto corev1.Protocol, num uint16, ingress bool) bool {
	subject, other := dst, src
	if !ingress {
		subject, other = src, dst
	}
	selected := false
	for _, np := range pols {
		in, eg := Types(np)
		if np.Namespace != subject.Namespace || !selects(&np.Spec.PodSelector, subject.Labels) || (ingress && !in) || (!ingress && !eg) {
			continue
		}
		selected = true
		if ingress {
			for _, r := range np.Spec.Ingress {
				if peerAdmits(np.Namespace, r.From, other, nsLabels) && portAdmits(r.Ports, dst, proto, num) {
					return true
				}
			}
		} else {
			for _, r := range np.Spec.Egress {
				if peerAdmits(np.Namespace, r.To, other, nsLabels) && portAdmits(r.Ports, dst, proto, num) {
					return true
				}
			}
		}
	}
	return !selected
}

// Allows reports whether src may open a connection to dst on proto/port:
// src's egress and dst's ingress both admit it.
func Allows(pols []*networkingv1.NetworkPolicy, nsLabels map[string]map[string]string, src, dst Pod, proto corev1.Protocol, num uint16) bool {
	return Admits(pols, nsLabels, src, dst, proto, num, false) && Admits(pols, nsLabels, src, dst, proto, num, true)
}
