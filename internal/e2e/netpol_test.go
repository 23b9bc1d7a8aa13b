package e2e

import (
	"context"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/bench/gen"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestNetworkPolicy: the networkpolicy mode on two nodes following a real
// API server. NetworkPolicies created through the API are enforced on
// both nodes within seconds: default allow; a namespace's deny-all; a
// namespace selector; a pod selector with a port; an egress deny; replies
// of allowed connections pass; the node reaches its pods; deleting the
// policies restores everything.
func TestNetworkPolicy(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	kubetest.Require(t)
	c := up(t, "np", cluster.Spec{
		// Per node: p1 default, p2 alpha, p3 beta.
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}},
		Mode:         "networkpolicy",
		ControlPlane: cluster.ControlPlaneKube,
		CNI:          true,
	})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	def1, alpha1, beta1 := n1.Pods[0], n1.Pods[1], n1.Pods[2]
	def2, alpha2, beta2 := n2.Pods[0], n2.Pods[1], n2.Pods[2]
	checkReach(t, c, "no policy: everything reaches everything")

	kc, err := kubernetes.NewForConfig(c.Kube.Admin())
	if err != nil {
		t.Fatal(err)
	}
	ping, tcp, expect := policyTools(t, c, alpha2)
	bench := filepath.Join(binDir, "gvs-bench")
	create := func(np *networkingv1.NetworkPolicy) {
		t.Helper()
		if _, err := kc.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx(t), np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ns := func(name string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: name}}
	}
	app := func(p cluster.Pod) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": p.Name}}
	}
	ip := func(p cluster.Pod) string { return p.IP.String() }

	// A policy change applies to existing connections: a stream from
	// default's pod to alpha's, running when alpha comes to deny all
	// ingress, does not get to its end (its next data segments are
	// dropped; only replies pass by state).
	streamed := make(chan bool, 1)
	go func() {
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, def1.NS, bench, "tcp-client", "-c", ip(alpha2)+":5201", "-t", "6s")
		streamed <- err == nil && strings.Contains(string(out), "intact=true")
	}()
	time.Sleep(2 * time.Second) // pacing: the stream runs before the policy changes under it

	// alpha denies all ingress.
	create(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "deny-all"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}})
	if <-streamed {
		t.Error("a TCP stream running when alpha came to deny all ingress went on to its end")
	}
	expect("alpha denies ingress", []reachProbe{
		{"beta n1 → alpha n2", func() bool { return ping(beta1.Pod, ip(alpha2)) }, false},
		{"alpha n1 → alpha n2", func() bool { return ping(alpha1.Pod, ip(alpha2)) }, false},
		{"default n2 → alpha n2 (same node)", func() bool { return ping(def2.Pod, ip(alpha2)) }, false},
		{"alpha n1 → beta n2 (and its reply)", func() bool { return ping(alpha1.Pod, ip(beta2)) }, true},
		{"beta n1 → default n2", func() bool { return ping(beta1.Pod, ip(def2)) }, true},
		{"node n2 → alpha n2 (kubelet probes)", func() bool { return ping(lab.Pod{NS: n2.NS}, ip(alpha2)) }, true},
	})

	// alpha admits namespace beta.
	create(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "from-beta"},
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: ns("beta")}}}}}})
	expect("alpha admits beta", []reachProbe{
		{"beta n1 → alpha n2", func() bool { return ping(beta1.Pod, ip(alpha2)) }, true},
		{"beta n2 → alpha n1", func() bool { return ping(beta2.Pod, ip(alpha1)) }, true},
		{"default n1 → alpha n2", func() bool { return ping(def1.Pod, ip(alpha2)) }, false},
		{"alpha n1 → alpha n2", func() bool { return ping(alpha1.Pod, ip(alpha2)) }, false},
	})

	// alpha's pod on n2 admits alpha's pod on n1 on TCP 5201 only.
	port := intstr.FromInt32(5201)
	create(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "tcp-5201"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *app(alpha2),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: app(alpha1)}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}}}})
	expect("a pod selector and a port", []reachProbe{
		{"alpha n1 → alpha n2 TCP 5201", func() bool { return tcp(alpha1.Pod, ip(alpha2)) }, true},
		{"alpha n1 → alpha n2 ping", func() bool { return ping(alpha1.Pod, ip(alpha2)) }, false},
		{"default n1 → alpha n2 TCP 5201", func() bool { return tcp(def1.Pod, ip(alpha2)) }, false},
	})

	// Policy changes under traffic lose no allowed packet: alpha's pod on
	// n1 probes alpha's pod on n2 over UDP 9000 (allowed by udp-9000)
	// while alpha's policies change around it; each change replaces the
	// destination's rules in one table update.
	echo, err := c.Lab.Start(ctx(t), alpha2.NS, filepath.Join(t.TempDir(), "echo.log"), bench, "udp-echo", "-l", ":9000", "-t", "10m")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Stop() })
	udp := corev1.ProtocolUDP
	p9000 := intstr.FromInt32(9000)
	udpPolicy := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "udp-9000"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *app(alpha2),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: app(alpha1)}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &p9000}}}}}}
	create(udpPolicy)
	if !testutil.Eventually(10*time.Second, func() bool {
		got, sent, _ := udpProbe(t, c.Lab, alpha1.NS, ip(alpha2)+":9000")
		return got == sent
	}) {
		t.Fatal("alpha n1 → alpha n2 UDP 9000 never allowed")
	}
	type probeResult struct {
		out string
		err error
	}
	probed := make(chan probeResult, 1)
	go func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, alpha1.NS, bench, "udp-probe", "-c", ip(alpha2)+":9000", "-n", "400", "-i", "10ms")
		probed <- probeResult{string(out), err}
	}()
	churn := []func() error{
		func() error { // another policy selecting the destination
			_, err := kc.NetworkingV1().NetworkPolicies("alpha").Create(ctx(t), &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "churn"},
				Spec: networkingv1.NetworkPolicySpec{PodSelector: *app(alpha2), Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: ns("default")}}}}}}, metav1.CreateOptions{})
			return err
		},
		func() error { // the allowing policy itself gains a port
			np, err := kc.NetworkingV1().NetworkPolicies("alpha").Get(ctx(t), "udp-9000", metav1.GetOptions{})
			if err != nil {
				return err
			}
			p := intstr.FromInt32(9001)
			np.Spec.Ingress[0].Ports = append(np.Spec.Ingress[0].Ports, networkingv1.NetworkPolicyPort{Protocol: &udp, Port: &p})
			_, err = kc.NetworkingV1().NetworkPolicies("alpha").Update(ctx(t), np, metav1.UpdateOptions{})
			return err
		},
		func() error {
			return kc.NetworkingV1().NetworkPolicies("alpha").Delete(ctx(t), "from-beta", metav1.DeleteOptions{})
		},
		func() error {
			return kc.NetworkingV1().NetworkPolicies("alpha").Delete(ctx(t), "churn", metav1.DeleteOptions{})
		},
		func() error {
			_, err := kc.NetworkingV1().NetworkPolicies("alpha").Create(ctx(t), &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "from-beta"},
				Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: ns("beta")}}}}}}, metav1.CreateOptions{})
			return err
		},
	}
	for _, change := range churn {
		time.Sleep(500 * time.Millisecond) // pacing: one change every half second
		if err := change(); err != nil {
			t.Fatal(err)
		}
	}
	res := <-probed
	var lr gen.LatencyResult
	if res.err != nil || json.Unmarshal([]byte(res.out), &lr) != nil || lr.Sent != 400 {
		t.Errorf("udp-probe under policy changes: %v\n%s", res.err, res.out)
	} else if lr.Received != lr.Sent {
		t.Errorf("policy changes under traffic lost %d of %d allowed probes", lr.Sent-lr.Received, lr.Sent)
	}

	// beta's pod on n1 may not send anything new.
	create(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "beta", Name: "no-egress"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *app(beta1), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}})
	expect("an egress deny", []reachProbe{
		{"beta n1 → default n2", func() bool { return ping(beta1.Pod, ip(def2)) }, false},
		{"beta n1 → beta n2", func() bool { return ping(beta1.Pod, ip(beta2)) }, false},
		{"default n2 → beta n1 (its reply passes egress)", func() bool { return ping(def2.Pod, ip(beta1)) }, true},
		{"beta n2 → default n1", func() bool { return ping(beta2.Pod, ip(def1)) }, true},
	})

	// A Service in front of alpha's pod on n2, DNATed by the real
	// kube-proxy: ingress is judged with the client's address after the
	// DNAT, egress with the backend's (the host sends the request back
	// through tun0, table 25 re-tags it, table 27 sees the real
	// destination).
	clusterIP := netip.MustParseAddr("172.30.0.20")
	if err := cluster.CreateKubeService(ctx(t), kc, "alpha", "web", clusterIP, alpha2.IP, 0); err != nil {
		t.Fatal(err)
	}
	stop, err := c.StartKubeProxy(ctx(t), c.KubeAdmin, "iptables")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	svc := clusterIP.String() + ":80"
	tcpTo := func(from lab.Pod, addr string) bool {
		cctx, cancel := context.WithTimeout(ctx(t), 4*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, from.NS, bench, "tcp-client", "-c", addr, "-bytes", "100000")
		return err == nil && strings.Contains(string(out), "intact=true")
	}
	if !testutil.Eventually(45*time.Second, func() bool { return tcpTo(alpha1.Pod, svc) }) { // kube-proxy's first sync
		t.Errorf("alpha n1 → alpha/web %s (allowed by tcp-5201): not reached", svc)
	}
	expect("a service", []reachProbe{
		{"beta n2 → alpha/web (from-beta)", func() bool { return tcpTo(beta2.Pod, svc) }, true},
		{"default n1 → alpha/web (no policy admits it)", func() bool { return tcpTo(def1.Pod, svc) }, false},
		{"beta n1 → alpha/web (its egress is denied after the DNAT)", func() bool { return tcpTo(beta1.Pod, svc) }, false},
	})

	for _, p := range []struct{ ns, name string }{{"alpha", "deny-all"}, {"alpha", "from-beta"}, {"alpha", "tcp-5201"}, {"alpha", "udp-9000"}, {"beta", "no-egress"}} {
		if err := kc.NetworkingV1().NetworkPolicies(p.ns).Delete(ctx(t), p.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	expect("policies deleted", []reachProbe{
		{"default n1 → alpha n2", func() bool { return ping(def1.Pod, ip(alpha2)) }, true},
		{"beta n1 → default n2", func() bool { return ping(beta1.Pod, ip(def2)) }, true},
	})
	checkReach(t, c, "policies deleted")
	if t.Failed() {
		for i := range c.Nodes {
			out, _ := c.Ctl(ctx(t), i, "dump-flows", "table=80")
			t.Logf("--- %s table 80 ---\n%s", c.Nodes[i].Name, out)
		}
	}
}

// reachProbe is one expectation of a policy test: what, how to try it, and
// whether it should get through.
type reachProbe struct {
	what string
	ok   func() bool
	want bool
}

// policyTools starts a TCP server on port 5201 in server and returns the
// probes the policy tests use: ping, a TCP exchange with that server, and
// expect, which checks a list of probes, each allowed 10 s to come to its
// expected answer (policies reach the nodes within that).
func policyTools(t *testing.T, c *cluster.Cluster, server cluster.Pod) (ping, tcp func(from lab.Pod, to string) bool, expect func(step string, probes []reachProbe)) {
	t.Helper()
	ping = func(from lab.Pod, to string) bool {
		_, err := c.Lab.Exec(ctx(t), from.NS, "ping", "-c", "1", "-W", "1", "-q", to)
		return err == nil
	}
	bench := filepath.Join(binDir, "gvs-bench")
	srv, err := c.Lab.Start(ctx(t), server.NS, filepath.Join(t.TempDir(), "tcp.log"), bench, "tcp-server", "-l", ":5201")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	tcp = func(from lab.Pod, to string) bool {
		cctx, cancel := context.WithTimeout(ctx(t), 4*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, from.NS, bench, "tcp-client", "-c", to+":5201", "-bytes", "100000")
		return err == nil && strings.Contains(string(out), "intact=true")
	}
	expect = func(step string, probes []reachProbe) {
		t.Helper()
		for _, p := range probes {
			var got bool
			if !testutil.Eventually(10*time.Second, func() bool { got = p.ok(); return got == p.want }) {
				t.Errorf("%s: %s: reached=%v, want %v", step, p.what, got, p.want)
			}
		}
	}
	return ping, tcp, expect
}
