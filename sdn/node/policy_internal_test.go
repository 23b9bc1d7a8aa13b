package node

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/netpol"
)

// TestPolicyEngineIncremental: after every change of a random sequence
// (pods of any node relabelled, added and removed, namespaces relabelled,
// policies set and deleted, local pods attached and detached), each local
// pod's installed policy rules are exactly what compiling it from scratch
// gives: recompiling only the pods a change can touch misses none.
func TestPolicyEngineIncremental(t *testing.T) {
	for seed := range 20 {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		cfg := sdn.NodeConfig{NodeName: "n1", NodeIP: netip.MustParseAddr("192.168.0.1"), Subnet: netip.MustParsePrefix("10.128.0.0/23"),
			ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")}, ServiceNetwork: netip.MustParsePrefix("172.30.0.0/16"),
			Mode: sdn.ModeNetworkPolicy}
		table := flowtable.New(flowtable.Config{})
		p, err := New(Config{Table: table, Node: cfg, Projects: map[string]uint32{"x": 10, "y": 11, "z": 0}})
		if err != nil {
			t.Fatal(err)
		}
		nss := []string{"x", "y", "z"}
		lbl := func() map[string]string {
			return map[string]string{"app": fmt.Sprint("a", r.IntN(3)), "tier": fmt.Sprint(r.IntN(2))}
		}
		sel := func() *metav1.LabelSelector {
			switch r.IntN(3) {
			case 0:
				return &metav1.LabelSelector{}
			case 1:
				return &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprint("a", r.IntN(3))}}
			}
			return &metav1.LabelSelector{MatchLabels: map[string]string{"tier": fmt.Sprint(r.IntN(2))}}
		}
		for step := range 150 {
			var err error
			ns := nss[r.IntN(3)]
			i := r.IntN(8)
			name := fmt.Sprint("p", i)
			ip := netip.AddrFrom4([4]byte{10, 128 + byte(i%2), 0, byte(2 + i)}) // even: local
			switch r.IntN(7) {
			case 0, 1:
				err = p.SetPolicyPod(netpol.Pod{Namespace: ns, Name: name, IP: ip, Labels: lbl()})
			case 2:
				err = p.DeletePolicyPod(ns, name)
			case 3:
				err = p.SetNamespaceLabels(ns, map[string]string{"team": fmt.Sprint(r.IntN(2))})
			case 4:
				np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprint("np", r.IntN(3))},
					Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel()}}
				peer := networkingv1.NetworkPolicyPeer{PodSelector: sel()}
				if r.IntN(2) == 0 {
					peer.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprint(r.IntN(2))}}
				}
				if r.IntN(2) == 0 {
					np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{peer}}}
				} else {
					np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
					np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{peer}}}
				}
				err = p.SetPolicy(np)
			case 5:
				err = p.DeletePolicy(ns, fmt.Sprint("np", r.IntN(3)))
			case 6:
				if i%2 != 0 {
					continue
				}
				if _, ok := p.Pod(ip); ok {
					err = p.RemovePod(ip)
				} else if !slices.ContainsFunc(slices.Collect(func(yield func(sdn.Pod) bool) {
					for _, q := range p.pods {
						if !yield(q) {
							return
						}
					}
				}), func(q sdn.Pod) bool { return q.Namespace == ns && q.Name == name }) {
					_, err = p.AddPod(sdn.Pod{Name: name, Namespace: ns, IP: ip, Port: sdn.FirstPodPort + uint32(i)})
				}
			}
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			// Every local pod's installed rules are its fresh compilation.
			for ip, pod := range p.pods {
				in, eg, err := p.pol.PodRules(p.policyPod(pod))
				if err != nil {
					t.Fatal(err)
				}
				want := strings.Join(sdn.Text(append(in, eg...)), "\n")
				var have []*flowtable.Rule
				for _, rule := range table.Rules() {
					if rule.Cookie == sdn.IngressCookie(ip) || rule.Cookie == sdn.EgressCookie(ip) {
						have = append(have, rule)
					}
				}
				got := sdn.Text(have)
				wantLines := sdn.Text(append(in, eg...))
				slices.Sort(got)
				slices.Sort(wantLines)
				if !slices.Equal(got, wantLines) {
					t.Fatalf("seed %d step %d: pod %s/%s has\n%s\nwant\n%s", seed, step, pod.Namespace, pod.Name, strings.Join(got, "\n"), want)
				}
			}
		}
	}
}
