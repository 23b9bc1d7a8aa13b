package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/gvswitch/gvs/internal/netpolref"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestNetworkPolicyUpstream runs the cases of the upstream Kubernetes
// NetworkPolicy e2e suite (internal/netpolref) on two gvs nodes in the
// networkpolicy mode: namespaces x, y, z with pods a, b, c and d (a and c
// on one node, b and d on the other), each labelled pod=NAME with the
// suite's named ports and serving TCP, UDP and SCTP on ports 80 and 81
// (gvs-bench netpol-serve). The policies and labels go through gvsctl into
// the registry, as an administrator would apply them. After every step of
// every case each pod probes every other on both ports and all three
// protocols at once (gvs-bench netpol-probe), and the table must match the
// reference evaluator's, within 20 s of the change.
func TestNetworkPolicyUpstream(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := up(t, "npu", cluster.Spec{
		// Per node: x, y, z, x, y, z.
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 6, Projects: []string{"x", "y", "z"}},
		Mode:         "networkpolicy",
		ControlPlane: cluster.ControlPlaneEmbedded,
	})
	// The suite's names: a and c on node 1, b and d on node 2.
	type member struct {
		ref netpolref.Pod
		pod cluster.Pod
	}
	world := map[string]*member{} // "x/a" → pod
	var order []string
	for _, ns := range []string{"x", "y", "z"} {
		var on [2][]cluster.Pod
		for ni, n := range c.Nodes {
			for _, p := range n.Pods {
				if p.Project == ns {
					on[ni] = append(on[ni], p)
				}
			}
		}
		if len(on[0]) != 2 || len(on[1]) != 2 {
			t.Fatalf("namespace %s: %d and %d pods on the nodes, want 2 and 2", ns, len(on[0]), len(on[1]))
		}
		for i, name := range []string{"a", "b", "c", "d"} {
			p := on[i%2][i/2]
			key := ns + "/" + name
			world[key] = &member{pod: p, ref: netpolref.Pod{Namespace: ns, Name: name, IP: p.IP,
				Labels: map[string]string{"pod": name}, Ports: netpolref.ServePorts()}}
			order = append(order, key)
		}
	}
	gvsctl := func(args ...string) {
		t.Helper()
		if out, err := c.RegistryCtl(ctx(t), args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	bench := filepath.Join(binDir, "gvs-bench")
	for _, key := range order {
		m := world[key]
		args := []string{"label", "pod", m.ref.Namespace + "/" + m.pod.Name, "pod=" + m.ref.Name}
		for _, np := range m.ref.Ports {
			args = append(args, "port", fmt.Sprintf("%s=%s/%d", np.Name, strings.ToLower(string(np.Protocol)), np.Port))
		}
		gvsctl(args...)
		srv, err := c.Lab.Start(ctx(t), m.pod.NS, filepath.Join(t.TempDir(), "serve.log"), bench, "netpol-serve", "-ports", "80,81")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Stop() })
	}
	nsLabels := map[string]map[string]string{}
	for _, ns := range []string{"x", "y", "z"} {
		nsLabels[ns] = map[string]string{corev1.LabelMetadataName: ns}
	}

	type probe struct {
		src, dst string
		proto    corev1.Protocol
		port     uint16
	}
	protos := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	// table probes every pair at once and returns what answered.
	table := func() (map[probe]bool, error) {
		out := map[probe]bool{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		var errs []error
		for _, sk := range order {
			var targets []string
			var probes []probe
			for _, dk := range order {
				if dk == sk {
					continue
				}
				for _, proto := range protos {
					for _, port := range []uint16{80, 81} {
						targets = append(targets, fmt.Sprintf("%s/%s:%d", strings.ToLower(string(proto)), world[dk].pod.IP, port))
						probes = append(probes, probe{sk, dk, proto, port})
					}
				}
			}
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx(t), 20*time.Second)
				defer cancel()
				raw, err := c.Lab.Exec(cctx, world[sk].pod.NS, append([]string{bench, "netpol-probe", "-timeout", "700ms", "-tries", "2"}, targets...)...)
				var got map[string]bool
				if err == nil {
					err = json.Unmarshal(raw, &got)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("probes from %s: %w\n%s", sk, err, raw))
					return
				}
				for i, p := range probes {
					out[p] = got[targets[i]]
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 {
			return nil, errs[0]
		}
		return out, nil
	}
	tables, probes := 0, 0
	for _, tc := range netpolref.UpstreamCases(func(key string) netip.Addr { return world[key].ref.IP }) {
		policies := map[string]*networkingv1.NetworkPolicy{}
		for si, st := range tc.Steps {
			if st.DeleteAll {
				for k, np := range policies {
					gvsctl("policy", "delete", "-n", np.Namespace, np.Name)
					delete(policies, k)
				}
			}
			if len(st.Apply) > 0 {
				var docs []string
				for _, np := range st.Apply {
					np = np.DeepCopy()
					np.APIVersion, np.Kind = "networking.k8s.io/v1", "NetworkPolicy"
					b, err := yaml.Marshal(np)
					if err != nil {
						t.Fatal(err)
					}
					docs = append(docs, string(b))
					policies[np.Namespace+"/"+np.Name] = np
				}
				f := filepath.Join(t.TempDir(), "policies.yaml")
				if err := os.WriteFile(f, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
					t.Fatal(err)
				}
				gvsctl("policy", "apply", "-f", f)
			}
			for ns, l := range st.NamespaceLabels {
				maps.Copy(nsLabels[ns], l)
				args := []string{"label", "namespace", ns}
				for k, v := range l {
					args = append(args, k+"="+v)
				}
				gvsctl(args...)
			}
			for key, l := range st.PodLabels {
				m := world[key]
				maps.Copy(m.ref.Labels, l)
				args := []string{"label", "pod", m.ref.Namespace + "/" + m.pod.Name}
				for k, v := range l {
					args = append(args, k+"="+v)
				}
				gvsctl(args...)
			}
			pols := slices.Collect(maps.Values(policies))
			want := map[probe]bool{}
			open := true
			for _, sk := range order {
				for _, dk := range order {
					if sk == dk {
						continue
					}
					for _, proto := range protos {
						for _, port := range []uint16{80, 81} {
							ok := netpolref.Allows(pols, nsLabels, world[sk].ref, world[dk].ref, proto, port)
							want[probe{sk, dk, proto, port}] = ok
							open = open && ok
						}
					}
				}
			}
			if open != st.Open {
				t.Errorf("%s, step %d: the reference opens everything: %v; upstream: %v", tc.Name, si+1, open, st.Open)
			}
			var mism []string // of the last table probed
			agreed := testutil.Poll(20*time.Second, "the reference's table", func() (bool, error) {
				got, err := table()
				if err != nil {
					t.Fatalf("%s, step %d: %v", tc.Name, si+1, err)
				}
				mism = mism[:0]
				for _, p := range slices.SortedFunc(maps.Keys(want), func(a, b probe) int {
					return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
				}) {
					if got[p] != want[p] {
						mism = append(mism, fmt.Sprintf("%s → %s %s/%d: reached=%v, want %v", p.src, p.dst, p.proto, p.port, got[p], want[p]))
					}
				}
				return len(mism) == 0, nil
			}) == nil
			tables++
			probes += len(want)
			if !agreed {
				t.Errorf("%s, step %d: %d of %d probes differ from the reference:\n%s", tc.Name, si+1, len(mism), len(want),
					strings.Join(mism[:min(len(mism), 12)], "\n"))
			}
		}
		// Clean slate: the next case starts without policies or extra
		// labels.
		for _, np := range policies {
			gvsctl("policy", "delete", "-n", np.Namespace, np.Name)
		}
		for ns, l := range nsLabels {
			var rm []string
			for k := range l {
				if k != corev1.LabelMetadataName {
					rm = append(rm, k+"-")
					delete(l, k)
				}
			}
			if len(rm) > 0 {
				gvsctl(append([]string{"label", "namespace", ns}, rm...)...)
			}
		}
		for _, key := range order {
			m := world[key]
			var rm []string
			for k := range m.ref.Labels {
				if k != "pod" {
					rm = append(rm, k+"-")
					delete(m.ref.Labels, k)
				}
			}
			if len(rm) > 0 {
				gvsctl(append([]string{"label", "pod", m.ref.Namespace + "/" + m.pod.Name}, rm...)...)
			}
		}
	}
	t.Logf("%d tables, %d probes (each answered or refused as the reference says)", tables, probes)
}
