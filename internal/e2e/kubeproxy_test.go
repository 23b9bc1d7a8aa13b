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
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/bench/cluster"
	"github.com/gvswitch/gvs/bench/lab"
	"github.com/gvswitch/gvs/internal/kubetest"
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
// host reaches a NodePort; a pod of another project is refused.
func TestKubeProxy(t *testing.T) {
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
		for _, argv := range [][]string{{"tcp-server", "-l", ":5201"}, {"udp-echo", "-l", ":9000", "-t", "10m"}, {"sctp-respond", "-port", "7777"}} {
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
		if err := createService(kctx, kc, "alpha", s.name, s.ip, s.backend, s.nodePort); err != nil {
			t.Fatal(err)
		}
		if out, err := c.RegistryCtl(ctx(t), "services", "set", "alpha/"+s.name, s.ip.String(), "tcp/80", "udp/53", "sctp/80"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
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
			var procs []*lab.Proc
			for _, n := range c.Nodes {
				p, err := c.Lab.Start(kctx, n.NS, filepath.Join(c.Lab.StateDir(), n.Name+"-kube-proxy-"+mode+".log"),
					filepath.Join(kubetest.BinDir(), kubetest.KubeProxyBinary),
					"--kubeconfig="+kubeconfig, "--proxy-mode="+mode, "--hostname-override="+n.Name,
					"--bind-address="+n.IP.String(), "--cluster-cidr=10.128.0.0/14",
					"--nodeport-addresses="+netip.PrefixFrom(n.IP, 32).String(),
					"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256",
					"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0")
				if err != nil {
					t.Fatal(err)
				}
				procs = append(procs, p)
			}
			t.Cleanup(func() {
				for i, p := range procs {
					p.Stop()
					if t.Failed() {
						b, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), c.Nodes[i].Name+"-kube-proxy-"+mode+".log"))
						t.Logf("--- %s kube-proxy ---\n%s", c.Nodes[i].Name, tail(string(b), 40))
					}
				}
				// The next mode starts from clean tables.
				for _, n := range c.Nodes {
					_, _ = c.Lab.Exec(context.Background(), n.NS, filepath.Join(kubetest.BinDir(), kubetest.KubeProxyBinary), "--cleanup", "--proxy-mode="+mode)
				}
			})
			// kube-proxy has programmed the ClusterIPs when the pod reaches
			// the first one.
			var out string
			if !eventually(45*time.Second, func() bool {
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
			// NodePort from the external host (kube-proxy masquerades it).
			ext := lab.Pod{Name: "external", NS: c.Lab.External.NS}
			if ok, out := tcpOK(ext, netip.AddrPortFrom(n1.IP, 30080).String()); !ok {
				t.Errorf("NodePort %s:30080 from the external host: not reached\n%s", n1.IP, out)
			}
		})
	}
}

// createService makes a selector-less Service with ports TCP 80 → 5201,
// UDP 53 → 9000 and SCTP 80 → 7777 (and a NodePort for TCP if nodePort is set), and its
// EndpointSlice with one ready endpoint at backend.
func createService(ctx context.Context, kc kubernetes.Interface, ns, name string, ip, backend netip.Addr, nodePort int32) error {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: ip.String(),
			Ports: []corev1.ServicePort{
				{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(5201)},
				{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(9000)},
				{Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 80, TargetPort: intstr.FromInt32(7777)},
			},
		},
	}
	if nodePort != 0 {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = nodePort
	}
	if _, err := kc.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("service %s/%s: %w", ns, name, err)
	}
	ready := true
	tcp, udp, sctp := corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP
	tcpName, udpName, sctpName := "tcp", "udp", "sctp"
	tcpPort, udpPort, sctpPort := int32(5201), int32(9000), int32(7777)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "gvs-e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{backend.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports: []discoveryv1.EndpointPort{
			{Name: &tcpName, Protocol: &tcp, Port: &tcpPort},
			{Name: &udpName, Protocol: &udp, Port: &udpPort},
			{Name: &sctpName, Protocol: &sctp, Port: &sctpPort},
		},
	}
	if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("endpoint slice of %s/%s: %w", ns, name, err)
	}
	return nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
