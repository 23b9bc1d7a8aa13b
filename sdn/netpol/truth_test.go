package netpol

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/netpolref"
)

// The truth tables of the Kubernetes NetworkPolicy e2e suite (namespaces
// x, y, z with pods a, b, c; probes on ports 80 and 81 over TCP, UDP and
// SCTP), here with random policies: for each case a reference evaluator,
// written from the API's documentation and independent of the compiler,
// says which probes a policy set allows, and the node's real flow table
// (the networkpolicy program plus the compiled rules) must agree on every
// probe. Pods a and b are on this node, c on the other: a probe between
// two local pods meets the source's egress and the destination's ingress,
// one from a remote pod only the ingress here, one to a remote pod only
// the egress here.

var truthProbes = []truthProbe{{corev1.ProtocolTCP, 80}, {corev1.ProtocolTCP, 81}, {corev1.ProtocolUDP, 80}, {corev1.ProtocolUDP, 81}, {corev1.ProtocolSCTP, 80}}

func truthWorld(r *rand.Rand) (*Cluster, map[string]testPod, []string) {
	c := NewCluster()
	pods := map[string]testPod{}
	var order []string
	vnids := map[string]uint32{"x": 10, "y": 11, "z": 0} // z shares VNID 0 with the host, as default does
	for ni, ns := range []string{"x", "y", "z"} {
		nl := map[string]string{corev1.LabelMetadataName: ns, "ns": ns}
		if r.IntN(2) == 0 {
			nl["tier"] = fmt.Sprint(1 + r.IntN(2))
		}
		c.SetNamespace(Namespace{Name: ns, VNID: vnids[ns], Labels: nl})
		for pi, name := range []string{"a", "b", "c"} {
			pl := map[string]string{"pod": name}
			if r.IntN(2) == 0 {
				pl["role"] = fmt.Sprint("r", 1+r.IntN(2))
			}
			var named []NamedPort
			if r.IntN(2) == 0 {
				named = append(named, NamedPort{Name: "serve-80-tcp", Port: 80})
			}
			if r.IntN(2) == 0 {
				named = append(named, NamedPort{Name: "serve-81-udp", Protocol: corev1.ProtocolUDP, Port: 81})
			}
			var ip string
			var port uint32
			if name == "c" {
				ip = fmt.Sprintf("10.129.0.%d", 2+ni)
			} else {
				ip = fmt.Sprintf("10.128.0.%d", 2+ni*2+pi)
				port = uint32(3 + ni*2 + pi)
			}
			p := testPod{Pod: Pod{Namespace: ns, Name: name, IP: netip.MustParseAddr(ip), Labels: pl, Ports: named}, port: port, vnid: vnids[ns]}
			key := ns + "/" + name
			pods[key] = p
			order = append(order, key)
			c.SetPod(p.Pod)
		}
	}
	return c, pods, order
}

func randSelector(r *rand.Rand, key string, values ...string) *metav1.LabelSelector {
	switch r.IntN(4) {
	case 0:
		return &metav1.LabelSelector{}
	case 1:
		return &metav1.LabelSelector{MatchLabels: map[string]string{key: values[r.IntN(len(values))]}}
	case 2:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOpIn,
			Values: []string{values[r.IntN(len(values))], values[r.IntN(len(values))]}}}}
	}
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: metav1.LabelSelectorOpExists}}}
}

func randPeers(r *rand.Rand) []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for range r.IntN(3) {
		var p networkingv1.NetworkPolicyPeer
		switch r.IntN(4) {
		case 0:
			p.PodSelector = randSelector(r, "pod", "a", "b", "c")
		case 1:
			p.NamespaceSelector = randSelector(r, "ns", "x", "y", "z")
		case 2:
			p.PodSelector = randSelector(r, "pod", "a", "b", "c")
			p.NamespaceSelector = randSelector(r, "tier", "1", "2")
		default:
			b := &networkingv1.IPBlock{CIDR: []string{"10.128.0.0/16", "10.128.0.0/29", "10.129.0.0/24", "10.0.0.0/8"}[r.IntN(4)]}
			if r.IntN(2) == 0 {
				cidr := netip.MustParsePrefix(b.CIDR)
				b.Except = []string{netip.PrefixFrom(cidr.Addr().Next().Next().Next(), 31).Masked().String()}
				if cidr.Bits() > 30 {
					b.Except = nil
				}
			}
			p.IPBlock = b
		}
		out = append(out, p)
	}
	return out
}

func randPorts(r *rand.Rand) []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for range r.IntN(3) {
		proto := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}[r.IntN(3)]
		var p networkingv1.NetworkPolicyPort
		if r.IntN(4) > 0 {
			p.Protocol = &proto
		}
		switch r.IntN(4) {
		case 0: // every port of the protocol
		case 1:
			n := intstr.FromInt32(int32(80 + r.IntN(2)))
			p.Port = &n
		case 2:
			n := intstr.FromInt32(80)
			end := int32(81)
			p.Port, p.EndPort = &n, &end
		default:
			n := intstr.FromString([]string{"serve-80-tcp", "serve-81-udp"}[r.IntN(2)])
			p.Port = &n
		}
		out = append(out, p)
	}
	return out
}

func randPolicy(r *rand.Rand, i int) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: []string{"x", "y", "z"}[r.IntN(3)], Name: fmt.Sprint("p", i)}}
	np.Spec.PodSelector = *randSelector(r, "pod", "a", "b", "c")
	switch r.IntN(4) {
	case 0:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 1:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	case 2:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	for range r.IntN(3) {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: randPeers(r), Ports: randPorts(r)})
	}
	for range r.IntN(3) {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: randPeers(r), Ports: randPorts(r)})
	}
	return np
}

// ref is a pod as the reference evaluator (internal/netpolref) takes it.
func ref(p testPod) netpolref.Pod {
	out := netpolref.Pod{Namespace: p.Namespace, Name: p.Name, IP: p.IP, Labels: p.Labels}
	for _, n := range p.Ports {
		out.Ports = append(out.Ports, netpolref.NamedPort{Name: n.Name, Protocol: n.Protocol, Port: n.Port})
	}
	return out
}

func TestTruthTables(t *testing.T) {
	cases := 150
	if n, err := strconv.Atoi(os.Getenv("GVS_TRUTH_CASES")); err == nil {
		cases = n
	}
	if testing.Short() {
		cases = 30
	}
	probes := 0
	for seed := range cases {
		r := rand.New(rand.NewPCG(uint64(seed), 42))
		c, pods, order := truthWorld(r)
		nsLabels := map[string]map[string]string{}
		for _, ns := range []string{"x", "y", "z"} {
			n, _ := c.Namespace(ns)
			nsLabels[ns] = n.Labels
		}
		var pols []*networkingv1.NetworkPolicy
		for i := range 1 + r.IntN(3) {
			np := randPolicy(r, i)
			if err := c.SetPolicy(np); err != nil {
				t.Fatalf("case %d: %v", seed, err)
			}
			pols = append(pols, np)
		}
		tb := table(t, c, pods)
		n, _, bad := checkTable(t, tb, pods, order, pols, nsLabels, truthProbes, fmt.Sprintf("case %d", seed))
		probes += n
		if bad > 0 {
			for _, np := range pols {
				t.Logf("case %d policy %s/%s: %+v", seed, np.Namespace, np.Name, np.Spec)
			}
		}
	}
	t.Logf("%d cases, %d probes", cases, probes)
}

// truthProbe is a protocol and destination port of a truth table.
type truthProbe struct {
	proto corev1.Protocol
	port  uint16
}

// checkTable checks every probe between every two pods (one of them on
// this node) through tb against the reference evaluator, reporting up to 5
// differences under label; it returns the probes made, those the reference
// refuses, and the differences.
func checkTable(t *testing.T, tb *flowtable.Table, pods map[string]testPod, order []string, pols []*networkingv1.NetworkPolicy,
	nsLabels map[string]map[string]string, probes []truthProbe, label string) (made, refused, bad int) {
	t.Helper()
	names := map[corev1.Protocol]string{corev1.ProtocolTCP: "tcp", corev1.ProtocolUDP: "udp", corev1.ProtocolSCTP: "sctp"}
	for _, sk := range order {
		for _, dk := range order {
			src, dst := pods[sk], pods[dk]
			if sk == dk || (src.port == 0 && dst.port == 0) {
				continue
			}
			for _, pr := range probes {
				want := true
				if src.port != 0 {
					want = want && netpolref.Admits(pols, nsLabels, ref(src), ref(dst), pr.proto, pr.port, false)
				}
				if dst.port != 0 {
					want = want && netpolref.Admits(pols, nsLabels, ref(src), ref(dst), pr.proto, pr.port, true)
				}
				got := verdict(t, tb, src, names[pr.proto], dst.IP.String(), pr.port, false) != "drop"
				made++
				if !want {
					refused++
				}
				if got != want {
					if bad < 5 {
						t.Errorf("%s: %s → %s %s/%d: flow table allows=%v, reference %v", label, sk, dk, pr.proto, pr.port, got, want)
					}
					bad++
				}
			}
		}
	}
	return made, refused, bad
}
