// Package netpol compiles Kubernetes NetworkPolicy (networking.k8s.io/v1)
// into the rules of the networkpolicy mode's tables 27 (egress) and 80
// (ingress), for the pods of one node (docs/openshift-rules.md,
// "NetworkPolicy").
//
// A Cluster holds what policies select on: namespaces with their labels and
// VNIDs, pods of every node with their labels, addresses and named ports,
// and the policies. PodRules compiles the rules of one local pod; a pod no
// policy selects has none and accepts and sends everything (the tables'
// defaults). Selected pods get a default drop and, above it, one rule per
// allowed (peer, port) pair. Replies of allowed connections pass by
// connection state (the tables' static rules), and the node always reaches
// its pods. As in OpenShift SDN, a namespace selector on ingress becomes
// the namespaces' VNIDs (reg0, which the source pod's node sets and VXLAN
// carries), except for VNID 0, which the host shares: those namespaces'
// pods are listed by address.
package netpol

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
)

// ErrInvalidPolicy wraps the reasons a policy is refused.
var ErrInvalidPolicy = errors.New("netpol: invalid NetworkPolicy")

// Namespace is a namespace as policies see it.
type Namespace struct {
	Name   string
	Labels map[string]string
	// VNID is the namespace's NetNamespace netid (0: global, as default).
	VNID uint32
}

// Pod is a pod of any node as policies see it.
type Pod struct {
	Namespace, Name string
	// IP is the pod's address on the pod network; invalid for a pod
	// without one yet or on the host network (never a peer).
	IP     netip.Addr
	Labels map[string]string
	// Ports are its containers' named ports, for policies that name them.
	Ports []NamedPort
}

// NamedPort is a container port with a name.
type NamedPort struct {
	Name     string
	Protocol corev1.Protocol // "" is TCP
	Port     uint16
}

type key struct{ namespace, name string }

// Cluster is the state policies are compiled against. It is not safe for
// concurrent use.
type Cluster struct {
	namespaces map[string]Namespace
	pods       map[key]Pod
	policies   map[key]*policy
}

// NewCluster returns an empty cluster.
func NewCluster() *Cluster {
	return &Cluster{namespaces: map[string]Namespace{}, pods: map[key]Pod{}, policies: map[key]*policy{}}
}

// SetNamespace records or replaces a namespace.
func (c *Cluster) SetNamespace(ns Namespace) { c.namespaces[ns.Name] = ns }

// DeleteNamespace forgets a namespace.
func (c *Cluster) DeleteNamespace(name string) { delete(c.namespaces, name) }

// SetPod records or replaces a pod.
func (c *Cluster) SetPod(p Pod) { c.pods[key{p.Namespace, p.Name}] = p }

// DeletePod forgets a pod.
func (c *Cluster) DeletePod(namespace, name string) { delete(c.pods, key{namespace, name}) }

// SetPolicy records or replaces a policy, after checking it; a refused
// policy leaves the previous one of its name in place.
func (c *Cluster) SetPolicy(np *networkingv1.NetworkPolicy) error {
	p, err := parsePolicy(np)
	if err != nil {
		return err
	}
	c.policies[key{np.Namespace, np.Name}] = p
	return nil
}

// DeletePolicy forgets a policy.
func (c *Cluster) DeletePolicy(namespace, name string) { delete(c.policies, key{namespace, name}) }

// policy is a NetworkPolicy with its selectors parsed.
type policy struct {
	namespace, name string
	selector        labels.Selector
	ingress, egress bool // policy types
	in, out         []policyRule
}

type policyRule struct {
	peers []peer // none: every peer
	ports []port // none: every port
}

type peer struct {
	pods, namespaces labels.Selector // nil: not given
	block            []netip.Prefix  // an ipBlock, its excepts taken out
	isBlock          bool
}

type port struct {
	protocol corev1.Protocol
	any      bool   // no port: every port of the protocol
	name     string // a named port
	from, to uint16 // a number or a range
}

func parsePolicy(np *networkingv1.NetworkPolicy) (*policy, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s/%s: %s", ErrInvalidPolicy, np.Namespace, np.Name, fmt.Sprintf(format, args...))
	}
	if np.Namespace == "" || np.Name == "" {
		return nil, bad("no namespace or name")
	}
	p := &policy{namespace: np.Namespace, name: np.Name}
	var err error
	if p.selector, err = metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil {
		return nil, bad("podSelector: %v", err)
	}
	if len(np.Spec.PolicyTypes) == 0 {
		p.ingress, p.egress = true, len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			p.ingress = true
		case networkingv1.PolicyTypeEgress:
			p.egress = true
		default:
			return nil, bad("policyTypes: %q", t)
		}
	}
	for i, r := range np.Spec.Ingress {
		pr, err := parseRule(r.From, r.Ports)
		if err != nil {
			return nil, bad("ingress[%d]: %v", i, err)
		}
		p.in = append(p.in, pr)
	}
	for i, r := range np.Spec.Egress {
		pr, err := parseRule(r.To, r.Ports)
		if err != nil {
			return nil, bad("egress[%d]: %v", i, err)
		}
		p.out = append(p.out, pr)
	}
	return p, nil
}

func parseRule(peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) (policyRule, error) {
	var r policyRule
	for i, pe := range peers {
		var q peer
		given := 0
		if pe.PodSelector != nil {
			s, err := metav1.LabelSelectorAsSelector(pe.PodSelector)
			if err != nil {
				return r, fmt.Errorf("peer %d podSelector: %v", i, err)
			}
			q.pods, given = s, given+1
		}
		if pe.NamespaceSelector != nil {
			s, err := metav1.LabelSelectorAsSelector(pe.NamespaceSelector)
			if err != nil {
				return r, fmt.Errorf("peer %d namespaceSelector: %v", i, err)
			}
			q.namespaces, given = s, given+1
		}
		if pe.IPBlock != nil {
			if given > 0 {
				return r, fmt.Errorf("peer %d: ipBlock with a selector", i)
			}
			block, err := parseBlock(pe.IPBlock)
			if err != nil {
				return r, fmt.Errorf("peer %d ipBlock: %v", i, err)
			}
			q.block, q.isBlock, given = block, true, 1
		}
		if given == 0 {
			return r, fmt.Errorf("peer %d: empty", i)
		}
		r.peers = append(r.peers, q)
	}
	for i, pp := range ports {
		q := port{protocol: corev1.ProtocolTCP}
		if pp.Protocol != nil {
			q.protocol = *pp.Protocol
		}
		switch q.protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			return r, fmt.Errorf("port %d: protocol %q", i, q.protocol)
		}
		switch {
		case pp.Port == nil:
			if pp.EndPort != nil {
				return r, fmt.Errorf("port %d: endPort without port", i)
			}
			q.any = true
		case pp.Port.Type == intstr.String:
			if pp.EndPort != nil {
				return r, fmt.Errorf("port %d: endPort with a named port", i)
			}
			if pp.Port.StrVal == "" {
				return r, fmt.Errorf("port %d: empty name", i)
			}
			q.name = pp.Port.StrVal
		default:
			n := pp.Port.IntVal
			if n < 1 || n > 65535 {
				return r, fmt.Errorf("port %d: %d out of 1..65535", i, n)
			}
			q.from, q.to = uint16(n), uint16(n)
			if pp.EndPort != nil {
				if *pp.EndPort < n || *pp.EndPort > 65535 {
					return r, fmt.Errorf("port %d: endPort %d not in %d..65535", i, *pp.EndPort, n)
				}
				q.to = uint16(*pp.EndPort)
			}
		}
		r.ports = append(r.ports, q)
	}
	return r, nil
}

// parseBlock returns an ipBlock's CIDR with its excepts taken out, as
// disjoint prefixes. gvs's pod network is IPv4: an IPv6 block matches
// nothing here (an empty list, not an error).
func parseBlock(b *networkingv1.IPBlock) ([]netip.Prefix, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, err
	}
	cidr = cidr.Masked()
	var except []netip.Prefix
	for _, e := range b.Except {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("except: %v", err)
		}
		p = p.Masked()
		if p.Addr().Is4() != cidr.Addr().Is4() || !cidr.Contains(p.Addr()) || p.Bits() < cidr.Bits() {
			return nil, fmt.Errorf("except %v is not inside %v", p, cidr)
		}
		except = append(except, p)
	}
	if !cidr.Addr().Is4() {
		return nil, nil
	}
	return subtract(cidr, except), nil
}

// subtract returns p without the prefixes in except, as the fewest
// disjoint prefixes, in address order.
func subtract(p netip.Prefix, except []netip.Prefix) []netip.Prefix {
	overlaps := false
	for _, e := range except {
		if e.Bits() <= p.Bits() && e.Contains(p.Addr()) {
			return nil // all of p is excepted
		}
		if p.Contains(e.Addr()) {
			overlaps = true
		}
	}
	if !overlaps {
		return []netip.Prefix{p}
	}
	lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	a := p.Addr().As4()
	bit := p.Bits()
	a[bit/8] |= 0x80 >> (bit % 8)
	hi := netip.PrefixFrom(netip.AddrFrom4(a), p.Bits()+1)
	return append(subtract(lo, except), subtract(hi, except)...)
}

// portRange returns the (value, mask) pairs that match exactly the ports
// from..to, the fewest aligned blocks.
func portRange(from, to uint16) [][2]uint16 {
	var out [][2]uint16
	for lo := uint32(from); lo <= uint32(to); {
		size := uint32(1)
		for lo%(size*2) == 0 && lo+size*2-1 <= uint32(to) && size < 1<<16 {
			size *= 2
		}
		out = append(out, [2]uint16{uint16(lo), uint16(^(size - 1))})
		lo += size
	}
	return out
}

// Selecting returns the names ("namespace/name", sorted) of the policies
// that select pod p for ingress and for egress: the policies whose rules
// PodRules compiles for it. Tools that explain a trace (sdn/why) name
// them.
func (c *Cluster) Selecting(p Pod) (ingress, egress []string) {
	for _, pol := range c.selecting(p.Namespace, p.Labels, true) {
		ingress = append(ingress, pol.namespace+"/"+pol.name)
	}
	for _, pol := range c.selecting(p.Namespace, p.Labels, false) {
		egress = append(egress, pol.namespace+"/"+pol.name)
	}
	return ingress, egress
}

// selecting returns the policies of namespace ns that select pod labels l
// for ingress (in) or egress, by name.
func (c *Cluster) selecting(ns string, l map[string]string, in bool) []*policy {
	var out []*policy
	for _, p := range c.policies {
		if p.namespace != ns || (in && !p.ingress) || (!in && !p.egress) || !p.selector.Matches(labels.Set(l)) {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *policy) int { return strings.Compare(a.name, b.name) })
	return out
}

// peerPods returns the pods (with addresses) a selector peer of a policy
// in namespace ns matches, in a fixed order.
func (c *Cluster) peerPods(ns string, q peer) []Pod {
	var out []Pod
	for _, p := range c.pods {
		if !p.IP.IsValid() || p.IP.Is6() {
			continue
		}
		if q.namespaces == nil {
			if p.Namespace != ns {
				continue
			}
		} else {
			// A namespace not known yet has no labels.
			if !q.namespaces.Matches(labels.Set(c.namespaces[p.Namespace].Labels)) {
				continue
			}
		}
		if q.pods != nil && !q.pods.Matches(labels.Set(p.Labels)) {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pod) int { return a.IP.Compare(b.IP) })
	return out
}

type match = []flowtable.Cond

func protoCond(p corev1.Protocol) flowtable.Cond {
	switch p {
	case corev1.ProtocolUDP:
		return flowtable.UDP()
	case corev1.ProtocolSCTP:
		return flowtable.SCTP()
	}
	return flowtable.TCP()
}

// portMatches returns the matches of a rule's ports on a destination pod
// (its named ports resolved; nil: a destination that is not a pod, where a
// named port matches nothing).
func portMatches(ports []port, dst *Pod) []match {
	if len(ports) == 0 {
		return []match{{flowtable.IP()}}
	}
	var out []match
	for _, q := range ports {
		proto := protoCond(q.protocol)
		switch {
		case q.any:
			out = append(out, match{proto})
		case q.name != "":
			if dst == nil {
				continue
			}
			for _, np := range dst.Ports {
				npProto := np.Protocol
				if npProto == "" {
					npProto = corev1.ProtocolTCP
				}
				if np.Name == q.name && npProto == q.protocol {
					out = append(out, match{proto, flowtable.TpDst(np.Port)})
				}
			}
		case q.from == q.to:
			out = append(out, match{proto, flowtable.TpDst(q.from)})
		default:
			for _, vm := range portRange(q.from, q.to) {
				out = append(out, match{proto, flowtable.TpDstMasked(vm[0], vm[1])})
			}
		}
	}
	return out
}

// Priorities in tables 27 and 80.
const (
	PriorityAllow = 150 // a (peer, port) pair a policy allows
	PriorityDeny  = 100 // a selected pod's default
)

// PodRules returns the ingress rules (table 80, cookie sdn.IngressCookie)
// and egress rules (table 27, sdn.EgressCookie) of local pod p: none for a
// direction no policy selects it for. The rules are sorted and free of
// duplicates, so equal state gives equal rules.
func (c *Cluster) PodRules(p Pod) (ingress, egress []*flowtable.Rule, err error) {
	if !p.IP.Is4() {
		return nil, nil, fmt.Errorf("netpol: pod %s/%s has no IPv4 address", p.Namespace, p.Name)
	}
	if ingress, err = c.ingressRules(p); err != nil {
		return nil, nil, err
	}
	egress, err = c.egressRules(p)
	return ingress, egress, err
}

func (c *Cluster) ingressRules(p Pod) ([]*flowtable.Rule, error) {
	pols := c.selecting(p.Namespace, p.Labels, true)
	if len(pols) == 0 {
		return nil, nil
	}
	cookie := sdn.IngressCookie(p.IP)
	out := []flowtable.Action{flowtable.GotoTable(sdn.TableCommit)} // commit, output reg2
	var b flowtable.Builder
	b.Add(sdn.TableIsolation, PriorityDeny, cookie, match{flowtable.IP(), flowtable.NwDst(p.IP)})
	for _, pol := range pols {
		for _, r := range pol.in {
			ports := portMatches(r.ports, &p)
			for _, src := range c.sources(pol.namespace, r.peers) {
				for _, pm := range ports {
					m := append(slices.Clone(pm), flowtable.NwDst(p.IP))
					b.Add(sdn.TableIsolation, PriorityAllow, cookie, append(m, src...), out...)
				}
			}
		}
	}
	return finish(b.Rules())
}

// sources returns the source matches of an ingress rule's peers: nil
// peers, any source (one empty match).
func (c *Cluster) sources(ns string, peers []peer) []match {
	if len(peers) == 0 {
		return []match{{}}
	}
	var out []match
	for _, q := range peers {
		if q.isBlock {
			for _, pf := range q.block {
				out = append(out, match{flowtable.NwSrcPrefix(pf)})
			}
			continue
		}
		if q.pods == nil { // namespaces only: their VNIDs, or for VNID 0 their pods
			var names []string
			for name, n := range c.namespaces {
				if q.namespaces.Matches(labels.Set(n.Labels)) {
					names = append(names, name)
				}
			}
			slices.Sort(names)
			for _, name := range names {
				n := c.namespaces[name]
				if n.VNID != 0 {
					out = append(out, match{flowtable.Reg(0, n.VNID&sdn.MaxVNID)})
					continue
				}
				for _, pp := range c.peerPods(name, peer{}) {
					out = append(out, match{flowtable.NwSrc(pp.IP)})
				}
			}
			continue
		}
		for _, pp := range c.peerPods(ns, q) {
			out = append(out, match{flowtable.NwSrc(pp.IP)})
		}
	}
	return out
}

func (c *Cluster) egressRules(p Pod) ([]*flowtable.Rule, error) {
	pols := c.selecting(p.Namespace, p.Labels, false)
	if len(pols) == 0 {
		return nil, nil
	}
	cookie := sdn.EgressCookie(p.IP)
	next := flowtable.GotoTable(sdn.TableConntrack)
	var b flowtable.Builder
	b.Add(sdn.TablePolicyEgress, PriorityDeny, cookie, match{flowtable.IP(), flowtable.NwSrc(p.IP)})
	add := func(pm, dst match) {
		m := append(slices.Clone(pm), flowtable.NwSrc(p.IP))
		b.Add(sdn.TablePolicyEgress, PriorityAllow, cookie, append(m, dst...), next)
	}
	for _, pol := range pols {
		for _, r := range pol.out {
			if len(r.peers) == 0 {
				for _, pm := range portMatches(r.ports, nil) {
					add(pm, nil)
				}
				// Named ports of any destination pod.
				for _, d := range c.peerPods("", peer{namespaces: labels.Everything()}) {
					for _, pm := range namedOnly(r.ports, &d) {
						add(pm, match{flowtable.NwDst(d.IP)})
					}
				}
				continue
			}
			for _, q := range r.peers {
				if q.isBlock {
					for _, pf := range q.block {
						for _, pm := range portMatches(r.ports, nil) {
							add(pm, match{flowtable.NwDstPrefix(pf)})
						}
					}
					// A named port is a pod's: resolved on the known
					// pods inside the block.
					for _, d := range c.peerPods("", peer{namespaces: labels.Everything()}) {
						if slices.ContainsFunc(q.block, func(pf netip.Prefix) bool { return pf.Contains(d.IP) }) {
							for _, pm := range namedOnly(r.ports, &d) {
								add(pm, match{flowtable.NwDst(d.IP)})
							}
						}
					}
					continue
				}
				for _, d := range c.peerPods(pol.namespace, q) {
					for _, pm := range portMatches(r.ports, &d) {
						add(pm, match{flowtable.NwDst(d.IP)})
					}
				}
			}
		}
	}
	return finish(b.Rules())
}

// namedOnly returns the matches of the named ports among ports on pod d.
func namedOnly(ports []port, d *Pod) []match {
	var named []port
	for _, q := range ports {
		if q.name != "" {
			named = append(named, q)
		}
	}
	if len(named) == 0 {
		return nil
	}
	return portMatches(named, d)
}

// finish sorts rules (by table, priority descending, then text) and drops
// duplicates.
func finish(rs []*flowtable.Rule, err error) ([]*flowtable.Rule, error) {
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(rs, func(a, b *flowtable.Rule) int {
		if a.Priority != b.Priority {
			return int(b.Priority) - int(a.Priority)
		}
		return strings.Compare(a.String(), b.String())
	})
	return slices.CompactFunc(rs, func(a, b *flowtable.Rule) bool { return a.Equal(b) }), nil
}

// Pod returns a known pod.
func (c *Cluster) Pod(namespace, name string) (Pod, bool) {
	p, ok := c.pods[key{namespace, name}]
	return p, ok
}

// Namespace returns a known namespace.
func (c *Cluster) Namespace(name string) (Namespace, bool) {
	n, ok := c.namespaces[name]
	return n, ok
}

// PeerNamespaces returns the namespaces whose policies have a peer that
// pod p matches, or whose rules depend on every pod (egress to any
// destination by a named port): the namespaces whose selected pods' rules
// a change of p (before or after it) can change.
func (c *Cluster) PeerNamespaces(p Pod) []string {
	ns := c.namespaces[p.Namespace] // unknown: no labels
	var out []string
	for _, pol := range c.policies {
		if slices.Contains(out, pol.namespace) {
			continue
		}
		if pol.dependsOn(p, ns) {
			out = append(out, pol.namespace)
		}
	}
	slices.Sort(out)
	return out
}

func (pol *policy) dependsOn(p Pod, ns Namespace) bool {
	rules := func(rs []policyRule, egress bool) bool {
		for _, r := range rs {
			if len(r.peers) == 0 && egress && slices.ContainsFunc(r.ports, func(q port) bool { return q.name != "" }) {
				return true
			}
			named := slices.ContainsFunc(r.ports, func(q port) bool { return q.name != "" })
			for _, q := range r.peers {
				if q.isBlock {
					// Named ports towards a block are resolved on the
					// pods inside it.
					if egress && named && slices.ContainsFunc(q.block, func(pf netip.Prefix) bool { return pf.Contains(p.IP) }) {
						return true
					}
					continue
				}
				if q.namespaces == nil {
					if p.Namespace != pol.namespace {
						continue
					}
				} else if !q.namespaces.Matches(labels.Set(ns.Labels)) {
					continue
				}
				if q.pods == nil || q.pods.Matches(labels.Set(p.Labels)) {
					return true
				}
			}
		}
		return false
	}
	return (pol.ingress && rules(pol.in, false)) || (pol.egress && rules(pol.out, true))
}

// NamespaceSelectorNamespaces returns the namespaces whose policies have
// a namespace selector that namespace labels l match: the namespaces whose
// selected pods' rules a namespace's label change (before or after) can
// change.
func (c *Cluster) NamespaceSelectorNamespaces(l map[string]string) []string {
	var out []string
	for _, pol := range c.policies {
		if slices.Contains(out, pol.namespace) {
			continue
		}
		for _, r := range slices.Concat(pol.in, pol.out) {
			if slices.ContainsFunc(r.peers, func(q peer) bool { return q.namespaces != nil && q.namespaces.Matches(labels.Set(l)) }) {
				out = append(out, pol.namespace)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}
