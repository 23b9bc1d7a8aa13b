package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn"
)

// TestServices: ClusterIPs DNATed by the node as kube-proxy does it
// (iptables DNAT in PREROUTING, its defaults: no --masquerade-all), with
// backends on the same node, on another node and on the host network, over
// TCP, UDP and SCTP. The backends' replies must come back through tun0 (the
// switch's connection state) for the host to undo the DNAT. In multitenant
// mode a pod reaches only its own project's services and the global
// projects', also when the host masquerades service traffic.
//
// SCTP is probed with an INIT and its INIT ACK over raw IP sockets (the
// kernel here has no SCTP sockets; its conntrack and NAT know SCTP). The
// real kube-proxy is TestKubeProxy's.
func TestServices(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := up(t, "svc", cluster.Spec{
		// Per node: p1 alpha, p2 beta, p3 default (global), p4 alpha.
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 4, Projects: []string{"alpha", "beta", "default"}, External: true},
		Mode:         "multitenant",
		VNIDs:        map[string]uint32{"alpha": 10, "beta": 11},
		ControlPlane: cluster.ControlPlaneEmbedded,
	})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	alpha1, beta1, def1, alpha1b := n1.Pods[0], n1.Pods[1], n1.Pods[2], n1.Pods[3]
	alpha2 := n2.Pods[0]
	if alpha1.Project != "alpha" || beta1.Project != "beta" || def1.Project != "default" || alpha1b.Project != "alpha" {
		t.Fatalf("unexpected projects: %s %s %s %s", alpha1.Project, beta1.Project, def1.Project, alpha1b.Project)
	}

	// Backends: a TCP server and a UDP echo server in each backend pod and
	// in node 2's own namespace (host network).
	bench := filepath.Join(binDir, "gvs-bench")
	for _, ns := range []string{alpha1b.NS, alpha2.NS, n2.NS} {
		srv, err := c.Lab.Start(ctx(t), ns, filepath.Join(t.TempDir(), "tcp.log"), bench, "tcp-server", "-l", ":5201")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Stop() })
		echo, err := c.Lab.Start(ctx(t), ns, filepath.Join(t.TempDir(), "udp.log"), bench, "udp-echo", "-l", ":9000", "-t", "10m")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { echo.Stop() })
		sctp, err := c.Lab.Start(ctx(t), ns, filepath.Join(t.TempDir(), "sctp.log"), bench, "sctp-respond", "-port", "7777")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sctp.Stop() })
	}

	// Services of project alpha, DNATed on node 1 (where the clients are).
	type svc struct {
		name, ip string
		backend  string // address of the backend
	}
	svcs := []svc{
		{"local", "172.30.0.10", alpha1b.IP.String()},
		{"remote", "172.30.0.11", alpha2.IP.String()},
		{"hostnet", "172.30.0.12", n2.IP.String()},
	}
	for _, s := range svcs {
		if out, err := c.RegistryCtl(ctx(t), "services", "set", "alpha/"+s.name, s.ip, "tcp/80", "udp/53", "sctp/80"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		ip, backend := netip.MustParseAddr(s.ip), netip.MustParseAddr(s.backend)
		if err := c.ServiceDNAT(ctx(t), 0, ip, "tcp", 80, netip.AddrPortFrom(backend, 5201)); err != nil {
			t.Fatal(err)
		}
		if err := c.ServiceDNAT(ctx(t), 0, ip, "udp", 53, netip.AddrPortFrom(backend, 9000)); err != nil {
			t.Fatal(err)
		}
		if err := c.ServiceDNAT(ctx(t), 0, ip, "sctp", 80, netip.AddrPortFrom(backend, 7777)); err != nil {
			t.Fatal(err)
		}
	}
	// The services reach node 1 through the registry.
	if !testutil.Eventually(10*time.Second, func() bool {
		out, err := c.Ctl(ctx(t), 0, "dump-flows", "table=60")
		return err == nil && strings.Count(string(out), "reg0=10") == 3*len(svcs)
	}) {
		t.Fatalf("node 1 has not the services' table 60 rules:\n%s", ctl(t, c, 0, "dump-flows", "table=60"))
	}

	// A refused connection hangs in SYN retries: each try is bounded.
	tcpOK := func(from cluster.Pod, ip string) (bool, string) {
		cctx, cancel := context.WithTimeout(ctx(t), 6*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, from.NS, bench, "tcp-client", "-c", ip+":80", "-bytes", fmt.Sprint(1<<20))
		return err == nil && strings.Contains(string(out), "intact=true"), string(out)
	}
	check := func(what string, from cluster.Pod, s svc, want bool) {
		t.Helper()
		if ok, out := tcpOK(from, s.ip); ok != want {
			t.Errorf("%s: TCP %s → service %s (%s): reached=%v, want %v\n%s", what, from.Name, s.name, s.ip, ok, want, out)
		}
		if got, sent, out := udpProbe(t, c.Lab, from.NS, s.ip+":53"); !probeAsWanted(want, got, sent) {
			t.Errorf("%s: UDP %s → service %s (%s): %d of %d answered, want reached=%v\n%s", what, from.Name, s.name, s.ip, got, sent, want, out)
		}
		// SCTP: an INIT and its INIT ACK over raw sockets (this kernel has
		// no SCTP sockets; its conntrack and NAT do know SCTP).
		if got, sent, out := sctpProbe(t, c.Lab, from.NS, s.ip+":80"); !probeAsWanted(want, got, sent) {
			t.Errorf("%s: SCTP %s → service %s (%s): %d of %d answered, want reached=%v\n%s", what, from.Name, s.name, s.ip, got, sent, want, out)
		}
	}

	t.Run("own-project", func(t *testing.T) {
		for _, s := range svcs {
			check("alpha pod", alpha1, s, true)
		}
	})

	t.Run("global-project", func(t *testing.T) {
		for _, s := range svcs {
			check("default pod", def1, s, true)
		}
	})
	t.Run("other-project", func(t *testing.T) {
		for _, s := range svcs {
			check("beta pod", beta1, s, false)
		}
	})
	t.Run("other-project-masqueraded", func(t *testing.T) {
		// As kube-proxy --masquerade-all would: the backend then sees the
		// gateway (VNID 0) as the source; table 60 must refuse beta first.
		rule := []string{"POSTROUTING", "-d", "10.128.0.0/14", "-o", "tun0", "-j", "MASQUERADE"}
		mustExec(t, c.Lab, n1.NS, append([]string{"iptables", "-t", "nat", "-A"}, rule...)...)
		defer mustExec(t, c.Lab, n1.NS, append([]string{"iptables", "-t", "nat", "-D"}, rule...)...)
		for _, s := range svcs {
			check("beta pod, masqueraded", beta1, s, false)
			check("alpha pod, masqueraded", alpha1, s, true)
		}
	})
	t.Run("project-joined", func(t *testing.T) {
		// oc adm pod-network join-projects --to=alpha beta: beta's pods
		// reach alpha's services.
		if out, err := c.Projects(ctx(t), "join", "alpha", "beta"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Cleanup(func() { _, _ = c.Projects(ctx(t), "isolate", "beta") })
		var out string
		if !testutil.Eventually(10*time.Second, func() bool {
			ok, o := tcpOK(beta1, svcs[1].ip)
			out = o
			return ok
		}) {
			t.Errorf("joined beta pod does not reach alpha's service:\n%s", out)
		}
	})
	t.Run("unregistered-service", func(t *testing.T) {
		// A ClusterIP the node has no service record for is dropped in
		// table 60 (multitenant fails closed), even with a DNAT rule.
		if err := c.ServiceDNAT(ctx(t), 0, netip.MustParseAddr("172.30.0.99"), "tcp", 80, netip.AddrPortFrom(alpha2.IP, 5201)); err != nil {
			t.Fatal(err)
		}
		if ok, out := tcpOK(alpha1, "172.30.0.99"); ok {
			t.Errorf("unregistered service reached:\n%s", out)
		}
	})
	t.Run("reply-path-is-what-works", func(t *testing.T) {
		// Negative control: without table 31's rule that sends replies of
		// DNATed connections back to tun0, a local backend's reply goes
		// straight to the client, which drops it (wrong source): the
		// service must break. Restored afterwards.
		dump := ctl(t, c, 0, "dump-flows", "table=31")
		if !strings.Contains(dump, "ct_mark=0x1/0x1") {
			t.Fatalf("no reply rule in table 31:\n%s", dump)
		}
		ctl(t, c, 0, "del-flows", "--strict", "table=31,priority=400,ip,ct_state=+rpl+trk,ct_mark=0x1/0x1")
		ok, out := tcpOK(alpha1, svcs[0].ip)
		gwMAC := sdn.FormatMAC(sdn.PodMAC(n1.Subnet.Addr().Next()))
		ctl(t, c, 0, "add-flow", "table=31,priority=400,ip,ct_state=+rpl+trk,ct_mark=0x1/0x1,actions=set_field:"+gwMAC+"->eth_dst,output:2")
		if ok {
			t.Errorf("service reached without the reply rule: the test cannot tell\n%s", out)
		}
		if ok, out := tcpOK(alpha1, svcs[0].ip); !ok {
			t.Errorf("service not reached after restoring the reply rule:\n%s", out)
		}
	})
}
