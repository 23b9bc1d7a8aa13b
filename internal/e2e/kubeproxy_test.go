package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestKubeProxy: the real kube-proxy (built from k8s.io/kubernetes by
// make kube-tools), in iptables mode and in nftables mode, runs in each
// node's namespace against a real API server, with its defaults (no
// --masquerade-all). Services and their EndpointSlices are made through
// the API (there is no controller manager in the lab); gvs-switchd follows
// the etcd registry, where the same services are recorded for the
// multitenant table 60 (the Kubernetes source of gvs-switchd is not used
// here). A pod reaches a ClusterIP with a backend on its own node, on
// another node and on the host network, over TCP, UDP and SCTP (an INIT
// and its INIT ACK over raw sockets: no SCTP sockets here); the external
// host reaches a NodePort and an externalIP; ClientIP session affinity
// keeps a client on one of two backends (without it, both answer); a pod of
// another project is refused.
func TestKubeProxy(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	kubetest.Require(t)
	c := up(t, "kp", cluster.Spec{
		// Per node: p1 alpha, p2 beta, p3 default (global), p4 alpha.
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 4, Projects: []string{"alpha", "beta", "default"}, External: true},
		Mode:         "multitenant",
		VNIDs:        map[string]uint32{"alpha": 10, "beta": 11},
		ControlPlane: cluster.ControlPlaneEmbedded,
	})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	alpha1, beta1, alpha1b, alpha2 := n1.Pods[0], n1.Pods[1], n1.Pods[3], n2.Pods[0]

	kctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := kubetest.Start(kctx, kubetest.Options{Lab: c.Lab, NS: n1.NS, Addr: n1.IP})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- kube-apiserver ---\n%s", srv.LogTail("kube-apiserver", 30))
		}
		_ = srv.Stop()
	})
	kc, err := kubernetes.NewForConfig(srv.Admin())
	if err != nil {
		t.Fatal(err)
	}

	// Backends: TCP, UDP and SCTP responders in two alpha pods and in node 2's
	// own namespace (host network).
	bench := filepath.Join(binDir, "gvs-bench")
	for _, ns := range []string{alpha1b.NS, alpha2.NS, n2.NS} {
		for _, argv := range [][]string{{"tcp-server", "-l", ":5201", "-name", ns}, {"udp-echo", "-l", ":9000", "-t", "10m"}, {"sctp-respond", "-port", "7777"}} {
			p, err := c.Lab.Start(kctx, ns, filepath.Join(t.TempDir(), argv[0]+".log"), append([]string{bench}, argv...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Stop() })
		}
	}
	type svc struct {
		name     string
		ip       netip.Addr
		backend  netip.Addr
		nodePort int32
	}
	svcs := []svc{
		{"local", netip.MustParseAddr("172.30.0.10"), alpha1b.IP, 0},
		{"remote", netip.MustParseAddr("172.30.0.11"), alpha2.IP, 30080},
		{"hostnet", netip.MustParseAddr("172.30.0.12"), n2.IP, 0},
	}
	if _, err := kc.CoreV1().Namespaces().Create(kctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-proxy waits for its Node (no kubelet here makes it).
	for _, n := range c.Nodes {
		if _, err := kc.CoreV1().Nodes().Create(kctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range svcs {
		if err := cluster.CreateKubeService(kctx, kc, "alpha", s.name, s.ip, s.backend, s.nodePort); err != nil {
			t.Fatal(err)
		}
		if out, err := c.RegistryCtl(ctx(t), "services", "set", "alpha/"+s.name, s.ip.String(), "tcp/80", "udp/53", "sctp/80"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// Two backends behind one ClusterIP, with and without ClientIP
	// session affinity; an externalIP the external host routes to node 1.
	sticky, spread := netip.MustParseAddr("172.30.0.13"), netip.MustParseAddr("172.30.0.14")
	external, externalIP := netip.MustParseAddr("172.30.0.15"), netip.MustParseAddr("192.168.250.10")
	for _, ks := range []cluster.KubeService{
		{Namespace: "alpha", Name: "sticky", ClusterIP: sticky, Backends: []netip.Addr{alpha1b.IP, alpha2.IP}, ClientIPAffinity: true},
		{Namespace: "alpha", Name: "spread", ClusterIP: spread, Backends: []netip.Addr{alpha1b.IP, alpha2.IP}},
		{Namespace: "alpha", Name: "external", ClusterIP: external, Backends: []netip.Addr{alpha2.IP}, ExternalIPs: []netip.Addr{externalIP}},
	} {
		if err := cluster.CreateKubeServiceSpec(kctx, kc, ks); err != nil {
			t.Fatal(err)
		}
		if out, err := c.RegistryCtl(ctx(t), "services", "set", "alpha/"+ks.Name, ks.ClusterIP.String(), "tcp/80"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	if out, err := c.Lab.Exec(kctx, c.Lab.External.NS, "ip", "route", "add", externalIP.String()+"/32", "via", n1.IP.String()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	kubeconfig := filepath.Join(srv.Dir, "kube-proxy.kubeconfig")
	if err := srv.WriteKubeconfig(kubeconfig, srv.Admin()); err != nil {
		t.Fatal(err)
	}

	tcpOK := func(from lab.Pod, addr string) (bool, string) {
		cctx, cancel := context.WithTimeout(ctx(t), 6*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, from.NS, bench, "tcp-client", "-c", addr, "-bytes", fmt.Sprint(1<<20))
		return err == nil && strings.Contains(string(out), "intact=true"), string(out)
	}
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run(mode, func(t *testing.T) {
			stop, err := c.StartKubeProxy(kctx, kubeconfig, mode)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					for _, n := range c.Nodes {
						b, _ := os.ReadFile(c.KubeProxyLog(n.Name, mode))
						t.Logf("--- %s kube-proxy ---\n%s", n.Name, tail(string(b), 40))
					}
				}
			})
			// kube-proxy has programmed the ClusterIPs when the pod reaches
			// the first one.
			var out string
			if !testutil.Eventually(45*time.Second, func() bool {
				ok, o := tcpOK(alpha1.Pod, svcs[0].ip.String()+":80")
				out = o
				return ok
			}) {
				t.Fatalf("alpha pod never reached %s through kube-proxy (%s mode):\n%s", svcs[0].ip, mode, out)
			}
			for _, s := range svcs {
				addr := s.ip.String()
				if ok, out := tcpOK(alpha1.Pod, addr+":80"); !ok {
					t.Errorf("TCP alpha → %s (%s): not reached\n%s", s.name, addr, out)
				}
				if got, sent, out := udpProbe(t, c.Lab, alpha1.NS, addr+":53"); !probeAsWanted(true, got, sent) {
					t.Errorf("UDP alpha → %s (%s): %d of %d answered\n%s", s.name, addr, got, sent, out)
				}
				if got, sent, out := sctpProbe(t, c.Lab, alpha1.NS, addr+":80"); !probeAsWanted(true, got, sent) {
					t.Errorf("SCTP alpha → %s (%s): %d of %d answered\n%s", s.name, addr, got, sent, out)
				}
				if ok, out := tcpOK(beta1.Pod, addr+":80"); ok {
					t.Errorf("TCP beta → alpha's %s (%s): reached\n%s", s.name, addr, out)
				}
			}
			// Session affinity: one client, one backend; without it both
			// backends answer (16 connections: all on one by chance with
			// probability 2^-15).
			backends := func(addr string, n int) map[string]int {
				seen := map[string]int{}
				for range n {
					ok, out := tcpOK(alpha1.Pod, addr)
					if _, name, found := strings.Cut(strings.TrimSpace(out), " by "); ok && found {
						seen[name]++
					} else {
						seen["(failed)"]++
					}
				}
				return seen
			}
			if seen := backends(sticky.String()+":80", 8); len(seen) != 1 || seen["(failed)"] > 0 {
				t.Errorf("ClientIP affinity: the backends answering one client: %v, want one", seen)
			}
			if seen := backends(spread.String()+":80", 16); len(seen) != 2 || seen["(failed)"] > 0 {
				t.Errorf("no affinity: the backends answering one client: %v, want both", seen)
			}
			// An externalIP from outside the cluster.
			if ok, out := tcpOK(lab.Pod{Name: "external", NS: c.Lab.External.NS}, externalIP.String()+":80"); !ok {
				t.Errorf("externalIP %s:80 from the external host: not reached\n%s", externalIP, out)
			}
			// NodePort from the external host (kube-proxy masquerades it).
			ext := lab.Pod{Name: "external", NS: c.Lab.External.NS}
			if ok, out := tcpOK(ext, netip.AddrPortFrom(n1.IP, 30080).String()); !ok {
				t.Errorf("NodePort %s:30080 from the external host: not reached\n%s", n1.IP, out)
			}
		})
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
