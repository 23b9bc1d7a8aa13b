package netpolref

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The cases of the upstream Kubernetes NetworkPolicy e2e suite
// (kubernetes/test/e2e/network/netpol, "Netpol NetworkPolicy between server
// and client", and its UDP and SCTP contexts), restated here as data: the
// world is namespaces x, y and z with pods a, b and c (each labelled
// pod=NAME, each namespace kubernetes.io/metadata.name=NAME; every pod
// serves TCP, UDP and SCTP on ports 80 and 81, named serve-PORT-PROTO), and
// each case is a sequence of steps (policies created, replaced or deleted,
// labels added), each followed by a truth table. Upstream states the
// expected tables by hand for the protocol and port each case probes;
// here every step's table covers every pod pair, both ports and all three
// protocols, and the expectation comes from this package's evaluator. The
// UDP and SCTP contexts' cases whose policies repeat a TCP case's
// (default-deny-ingress; a pod and namespace selector) are that case,
// probed on every protocol anyway.

// Step is one change of a case, after which the truth table is checked.
type Step struct {
	// Apply creates or replaces policies (by namespace and name).
	Apply []*networkingv1.NetworkPolicy
	// DeleteAll deletes every policy first.
	DeleteAll bool
	// NamespaceLabels and PodLabels add labels, by namespace and by
	// "namespace/pod".
	NamespaceLabels map[string]map[string]string
	PodLabels       map[string]map[string]string
	// Open says that upstream expects every pod to reach every other
	// after this step (on the ports and protocol it probes); every other
	// step refuses something.
	Open bool
}

// Case is one case ("It") of the suite.
type Case struct {
	Name  string
	Steps []Step
}

// ServePorts are the named ports every pod of the suite has.
func ServePorts() []NamedPort {
	var out []NamedPort
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
		for _, p := range []uint16{80, 81} {
			out = append(out, NamedPort{Name: servePortName(p, proto), Protocol: proto, Port: p})
		}
	}
	return out
}

func servePortName(p uint16, proto corev1.Protocol) string {
	n := map[corev1.Protocol]string{corev1.ProtocolTCP: "tcp", corev1.ProtocolUDP: "udp", corev1.ProtocolSCTP: "sctp"}[proto]
	return fmt.Sprintf("serve-%d-%s", p, n)
}

// Policy-building shorthands.

func ml(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func nsName(ns string) *metav1.LabelSelector { return ml(corev1.LabelMetadataName, ns) }

// policy is a policy of namespace ns selecting sel; in and eg say which
// types it has (upstream's SetSpecIngressRules / SetSpecEgressRules).
func policy(ns, name string, sel *metav1.LabelSelector, in []networkingv1.NetworkPolicyIngressRule, inType bool,
	eg []networkingv1.NetworkPolicyEgressRule, egType bool) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel, Ingress: in, Egress: eg}}
	if inType {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	}
	if egType {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	}
	return np
}

// ingress is an ingress-only policy; egress an egress-only one.
func ingress(ns, name string, sel *metav1.LabelSelector, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	return policy(ns, name, sel, rules, true, nil, false)
}

func egress(ns, name string, sel *metav1.LabelSelector, rules ...networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	return policy(ns, name, sel, nil, false, rules, true)
}

func from(peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: peers}
}

func to(peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{To: peers}
}

func pods(sel *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: sel}
}

func namespaces(sel *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: sel}
}

func both(ns, pod *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: pod}
}

func block(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

// port is a NetworkPolicyPort: a number or a name, and a protocol ("" for
// none given).
func port(p any, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	var out networkingv1.NetworkPolicyPort
	switch v := p.(type) {
	case int:
		ip := intstr.FromInt32(int32(v))
		out.Port = &ip
	case string:
		sp := intstr.FromString(v)
		out.Port = &sp
	}
	if proto != "" {
		out.Protocol = &proto
	}
	return out
}

func onPorts(r networkingv1.NetworkPolicyIngressRule, ports ...networkingv1.NetworkPolicyPort) networkingv1.NetworkPolicyIngressRule {
	r.Ports = ports
	return r
}

func egressPorts(ports ...networkingv1.NetworkPolicyPort) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{Ports: ports}
}

func steps(s ...Step) []Step { return s }

func apply(p ...*networkingv1.NetworkPolicy) Step { return Step{Apply: p} }

// open is apply for a step after which everything is reachable.
func open(p ...*networkingv1.NetworkPolicy) Step { return Step{Apply: p, Open: true} }

// UpstreamCases returns the suite's cases; ip gives a pod's address
// ("x/b"), for the cases that build an ipBlock from one.
func UpstreamCases(ip func(pod string) netip.Addr) []Case {
	const tcp, udp, sctp = corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP
	const in, notIn = metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn
	name := corev1.LabelMetadataName
	all := ml()
	podA := ml("pod", "a")
	host := func(pod string) string { return netip.PrefixFrom(ip(pod), 32).String() }
	large := func(pod string) string { return netip.PrefixFrom(ip(pod), 4).Masked().String() }
	return []Case{
		{"should support a 'default-deny-ingress' policy", steps(apply(ingress("x", "deny-ingress", all)))},
		{"should support a 'default-deny-all' policy", steps(apply(policy("x", "deny-all", all, nil, true, nil, true)))},
		{"should enforce policy to allow traffic from pods within server namespace based on PodSelector",
			steps(apply(ingress("x", "x-a-allows-x-b", podA, from(pods(ml("pod", "b"))))))},
		{"should enforce policy to allow ingress traffic for a target", steps(apply(
			ingress("x", "deny-all", all),
			ingress("x", "allow-all-to-a", podA, from(both(all, all)))))},
		{"should enforce policy to allow ingress traffic from pods in all namespaces",
			steps(open(ingress("x", "allow-from-another-ns", podA, from(namespaces(all)))))},
		{"should enforce policy to allow traffic only from a different namespace, based on NamespaceSelector",
			steps(apply(ingress("x", "allow-client-a-via-ns-selector", podA, from(namespaces(nsName("y"))))))},
		{"should enforce policy based on PodSelector with MatchExpressions",
			steps(apply(ingress("x", "x-a-allows-x-b", podA, from(pods(expr("pod", in, "b"))))))},
		{"should enforce policy based on NamespaceSelector with MatchExpressions",
			steps(apply(ingress("x", "allow-ns-y-match-selector", podA, from(namespaces(expr(name, in, "y"))))))},
		{"should enforce policy based on PodSelector or NamespaceSelector",
			steps(apply(ingress("x", "allow-ns-y-match-selector", podA, from(namespaces(expr(name, notIn, "x")), pods(ml("pod", "b"))))))},
		{"should enforce policy based on PodSelector and NamespaceSelector",
			steps(apply(ingress("x", "allow-ns-y-podselector-and-nsselector", podA, from(both(expr(name, notIn, "x"), ml("pod", "b"))))))},
		{"should enforce policy based on Multiple PodSelectors and NamespaceSelectors",
			steps(apply(ingress("x", "allow-ns-y-z-pod-b-c", podA, from(both(expr(name, notIn, "x"), expr("pod", in, "b", "c"))))))},
		{"should enforce policy based on any PodSelectors",
			steps(apply(ingress("x", "allow-ns-x-pod-b-c", podA, from(pods(ml("pod", "b")), pods(ml("pod", "c"))))))},
		{"should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector",
			steps(apply(ingress("x", "allow-ns-y-pod-a-via-namespace-pod-selector", podA, from(both(nsName("y"), ml("pod", "a"))))))},
		{"should enforce policy based on Ports",
			steps(apply(ingress("x", "allow-client-a-via-ns-selector", podA, onPorts(from(namespaces(nsName("y"))), port(81, tcp)))))},
		{"should enforce multiple, stacked policies with overlapping podSelectors", steps(
			apply(ingress("x", "allow-client-a-via-ns-selector", podA, onPorts(from(namespaces(nsName("y"))), port(81, tcp)))),
			apply(ingress("x", "allow-client-a-via-ns-selector-80", podA, onPorts(from(namespaces(nsName("y"))), port(80, tcp)))))},
		{"should support allow-all policy", steps(open(ingress("x", "allow-all", all, from())))},
		{"should allow ingress access on one named port",
			steps(apply(ingress("x", "allow-all", all, onPorts(from(), port("serve-81-tcp", "")))))},
		{"should allow ingress access from namespace on one named port",
			steps(apply(ingress("x", "allow-client-a-via-ns-selector-80", podA, onPorts(from(namespaces(nsName("y"))), port("serve-80-tcp", tcp)))))},
		{"should allow egress access on one named port",
			steps(apply(egress("x", "allow-egress", all, egressPorts(port("serve-80-tcp", "")))))},
		{"should enforce updated policy", steps(
			open(ingress("x", "allow-all-mutate-to-deny-all", all, from())),
			apply(ingress("x", "allow-all-mutate-to-deny-all", all)))},
		{"should allow ingress access from updated namespace", steps(
			apply(ingress("x", "allow-client-a-via-ns-selector", podA, from(namespaces(ml("ns2", "updated"))))),
			Step{NamespaceLabels: map[string]map[string]string{"y": {"ns2": "updated"}}})},
		{"should allow ingress access from updated pod", steps(
			apply(ingress("x", "allow-client-a-via-pod-selector", podA, from(pods(ml("pod", "b", "pod2", "updated"))))),
			Step{PodLabels: map[string]map[string]string{"x/b": {"pod2": "updated"}}})},
		{"should deny ingress from pods on other namespaces", steps(apply(ingress("x", "deny-empty-policy", all, from(pods(all)))))},
		{"should deny ingress access to updated pod", steps(
			open(ingress("x", "deny-ingress-via-label-selector", ml("target", "isolated"))),
			Step{PodLabels: map[string]map[string]string{"x/a": {"target": "isolated"}}})},
		{"should deny egress from pods based on PodSelector", steps(apply(egress("x", "deny-egress-pod-a", podA)))},
		{"should deny egress from all pods in a namespace", steps(apply(egress("x", "deny-egress-ns-x", all)))},
		{"should work with Ingress, Egress specified together", steps(apply(policy("x", "allow-client-a-via-pod-selector", podA,
			[]networkingv1.NetworkPolicyIngressRule{from(pods(ml("pod", "b")))}, true,
			[]networkingv1.NetworkPolicyEgressRule{egressPorts(port(80, ""))}, true)))},
		{"should support denying of egress traffic on the client side (even if the server explicitly allows this traffic)", steps(apply(
			egress("x", "allow-to-ns-y-pod-a", podA, to(both(nsName("y"), ml("pod", "a")))),
			ingress("y", "allow-from-xa-on-ya-match-selector", podA, from(both(nsName("x"), ml("pod", "a")))),
			ingress("y", "allow-from-xa-on-yb-match-selector", ml("pod", "b"), from(both(nsName("x"), ml("pod", "a"))))))},
		{"should enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector",
			steps(apply(egress("x", "allow-to-ns-y-pod-a", podA, to(both(nsName("y"), ml("pod", "a"))))))},
		{"should enforce ingress policy allowing any port traffic to a server on a specific protocol",
			steps(apply(ingress("x", "allow-ingress-by-proto", podA, onPorts(from(), port(nil, tcp)))))},
		{"should enforce multiple ingress policies with ingress allow-all policy taking precedence", steps(
			apply(ingress("x", "allow-ingress-port-80", all, onPorts(from(), port(80, "")))),
			open(ingress("x", "allow-ingress", all, from())))},
		{"should enforce multiple egress policies with egress allow-all policy taking precedence", steps(
			apply(egress("x", "allow-egress-port-80", all, egressPorts(port(80, "")))),
			open(egress("x", "allow-egress", all, to())))},
		{"should stop enforcing policies after they are deleted", steps(
			apply(policy("x", "deny-all", all, nil, true, nil, true)),
			Step{DeleteAll: true, Open: true})},
		{"should allow egress access to server in CIDR block",
			steps(apply(egress("x", "allow-client-a-via-cidr-egress-rule", podA, to(block(host("y/b"))))))},
		{"should enforce except clause while egress access to server in CIDR block",
			steps(apply(egress("x", "allow-client-a-via-cidr-egress-rule", podA, to(block(large("x/b"), host("x/b"))))))},
		{"should ensure an IP overlapping both IPBlock.CIDR and IPBlock.Except is allowed", steps(
			apply(egress("x", "allow-client-a-via-cidr-egress-rule", podA, to(block(large("x/b"), host("x/b"))))),
			apply(egress("x", "allow-client-a-via-cidr-egress-rule", podA, to(block(host("x/b"))))))},
		{"should enforce policies to check ingress and egress policies can be controlled independently based on PodSelector", steps(
			open(egress("x", "allow-egress-for-target", podA, to())),
			apply(ingress("x", "deny-ingress-via-label-selector", podA)))},
		{"should not mistakenly treat 'protocol: SCTP' as 'protocol: TCP', even if the plugin doesn't support SCTP", steps(apply(
			ingress("x", "deny-ingress", all),
			ingress("x", "allow-only-sctp-ingress-on-port-81", podA, onPorts(from(), port(81, sctp)))))},
		{"should properly isolate pods that are selected by a policy allowing SCTP, even if the plugin doesn't support SCTP",
			steps(apply(ingress("x", "allow-only-sctp-ingress-on-port-80", podA, onPorts(from(), port(80, sctp)))))},
		{"should not allow access by TCP when a policy specifies only UDP",
			steps(apply(ingress("x", "allow-only-udp-ingress-on-port-81", podA, onPorts(from(), port(81, udp)))))},
		{"should enforce policy to allow traffic based on NamespaceSelector with MatchLabels using default ns label",
			steps(apply(ingress("x", "allow-client-a-via-ns-selector-for-immutable-ns-label", podA, from(namespaces(ml(name, "y"))))))},
		{"should enforce policy based on NamespaceSelector with MatchExpressions using default ns label",
			steps(apply(egress("x", "allow-ns-y-match-selector-for-immutable-ns-label", podA, to(namespaces(expr(name, notIn, "y"))))))},
		{"UDP: should enforce policy based on Ports",
			steps(apply(ingress("x", "allow-ingress-on-port-81-ns-x", podA, onPorts(from(namespaces(nsName("y"))), port(81, udp)))))},
		{"SCTP: should enforce policy based on Ports",
			steps(apply(ingress("x", "allow-ingress-on-port-81-ns-x", podA, onPorts(from(namespaces(nsName("y"))), port(81, sctp)))))},
	}
}
