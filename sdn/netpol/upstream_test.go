package netpol

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gvswitch/gvs/internal/netpolref"
)

// The upstream NetworkPolicy e2e suite's cases (internal/netpolref), each
// step's truth table checked through the node's real flow table against
// the reference evaluator: namespaces x, y, z with pods a, b, c (a and b
// on this node, c on the other), ports 80 and 81 over TCP, UDP and SCTP.
// internal/e2e runs the same cases on two nodes in the lab.
func TestUpstreamCases(t *testing.T) {
	vnids := map[string]uint32{"x": 10, "y": 11, "z": 12}
	ip := func(key string) netip.Addr {
		ns, name := key[:1], key[2:]
		ni := map[string]int{"x": 0, "y": 1, "z": 2}[ns]
		if name == "c" {
			return netip.MustParseAddr(fmt.Sprintf("10.129.0.%d", 2+ni))
		}
		return netip.MustParseAddr(fmt.Sprintf("10.128.0.%d", 2+ni*2+map[string]int{"a": 0, "b": 1}[name]))
	}
	var named []NamedPort
	for _, p := range netpolref.ServePorts() {
		named = append(named, NamedPort{Name: p.Name, Protocol: p.Protocol, Port: p.Port})
	}
	probes, denied := 0, 0
	for _, tc := range netpolref.UpstreamCases(ip) {
		t.Run(tc.Name, func(t *testing.T) {
			c := NewCluster()
			nsLabels := map[string]map[string]string{}
			pods := map[string]testPod{}
			var order []string
			for ni, ns := range []string{"x", "y", "z"} {
				nsLabels[ns] = map[string]string{corev1.LabelMetadataName: ns}
				c.SetNamespace(Namespace{Name: ns, VNID: vnids[ns], Labels: nsLabels[ns]})
				for pi, name := range []string{"a", "b", "c"} {
					key := ns + "/" + name
					var port uint32
					if name != "c" {
						port = uint32(3 + ni*2 + pi)
					}
					p := testPod{Pod: Pod{Namespace: ns, Name: name, IP: ip(key), Labels: map[string]string{"pod": name}, Ports: named}, port: port, vnid: vnids[ns]}
					pods[key] = p
					order = append(order, key)
					c.SetPod(p.Pod)
				}
			}
			policies := map[string]*networkingv1.NetworkPolicy{}
			for si, st := range tc.Steps {
				if st.DeleteAll {
					for k, np := range policies {
						c.DeletePolicy(np.Namespace, np.Name)
						delete(policies, k)
					}
				}
				for _, np := range st.Apply {
					if err := c.SetPolicy(np); err != nil {
						t.Fatalf("step %d: %v", si+1, err)
					}
					policies[np.Namespace+"/"+np.Name] = np
				}
				for ns, l := range st.NamespaceLabels {
					maps.Copy(nsLabels[ns], l)
					c.SetNamespace(Namespace{Name: ns, VNID: vnids[ns], Labels: nsLabels[ns]})
				}
				for key, l := range st.PodLabels {
					p := pods[key]
					maps.Copy(p.Labels, l)
					pods[key] = p
					c.SetPod(p.Pod)
				}
				pols := slices.Collect(maps.Values(policies))
				before := denied
				made, refused, _ := checkTable(t, table(t, c, pods), pods, order, pols, nsLabels, upstreamProbes, fmt.Sprintf("step %d", si+1))
				probes += made
				denied += refused
				if open := denied == before; open != st.Open {
					t.Errorf("step %d: the reference refuses nothing: %v; upstream expects everything reachable: %v", si+1, open, st.Open)
				}
			}
		})
	}
	t.Logf("%d probes, %d refused", probes, denied)
}

var upstreamProbes = []truthProbe{{corev1.ProtocolTCP, 80}, {corev1.ProtocolTCP, 81}, {corev1.ProtocolUDP, 80}, {corev1.ProtocolUDP, 81}, {corev1.ProtocolSCTP, 80}, {corev1.ProtocolSCTP, 81}}
