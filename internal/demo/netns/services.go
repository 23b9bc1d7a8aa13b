package netns

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/bench/traffic"
	"github.com/gvswitch/gvs/lab/cluster"
)

// ServiceIP is the ClusterIP of the demo's Service alpha/web.
var ServiceIP = netip.MustParseAddr("172.30.0.10")

// services shows a Service of project alpha: the node DNATs its ClusterIP
// as kube-proxy does, an alpha pod reaches the backend on the other node
// (its replies come back through tun0 by connection state), and a beta pod
// is refused by the multitenant table 60 (in netpol mode, by alpha's
// NetworkPolicy at the backend).
func (r *run) services(ctx context.Context) {
	c := r.c
	res := &r.res.Service
	res.ClusterIP = ServiceIP
	client, other, backend := c.Nodes[0].Pods[1], c.Nodes[0].Pods[2], c.Nodes[1].Pods[1] // alpha, beta on n1; alpha on n2
	wait := time.Duration(0)
	if c.Kube != nil {
		// The Service and its EndpointSlice through the API server; the
		// real kube-proxy DNATs the ClusterIP in every node; gvs-switchd
		// follows the Service for table 60.
		r.step(fmt.Sprintf("services: alpha/web at ClusterIP %s:80 → backend %s (%s:5201) on n2, created through the API server,\n    DNATed by the real kube-proxy (iptables mode, no --masquerade-all) in each node",
			ServiceIP, backend.Name, backend.IP))
		kc, err := kubernetes.NewForConfig(c.Kube.Admin())
		if err != nil {
			r.fail(err.Error())
			return
		}
		if err := cluster.CreateKubeService(ctx, kc, "alpha", "web", ServiceIP, backend.IP, 0); err != nil {
			r.fail(err.Error())
			return
		}
		stop, err := c.StartKubeProxy(ctx, c.KubeAdmin, "iptables")
		if err != nil {
			r.fail(err.Error())
			return
		}
		defer stop()
		wait = 45 * time.Second // kube-proxy's first sync
	} else {
		r.step(fmt.Sprintf("services: alpha/web at ClusterIP %s:80 → backend %s (%s:5201) on n2, DNATed by n1 as kube-proxy does",
			ServiceIP, backend.Name, backend.IP))
		if out, err := c.RegistryCtl(ctx, "services", "set", "alpha/web", ServiceIP.String(), "tcp/80"); err != nil {
			r.fail(fmt.Sprintf("gvsctl services set: %v\n%s", err, out))
			return
		}
		if err := c.ServiceDNAT(ctx, 0, ServiceIP, "tcp", 80, netip.AddrPortFrom(backend.IP, 5201)); err != nil {
			r.fail(err.Error())
			return
		}
	}
	srv, err := r.startServer(ctx, backend.NS, "svc-tcp.log", 5201)
	if err != nil {
		r.fail(err.Error())
		return
	}
	defer srv.Stop()
	try := func(p cluster.Pod) (string, traffic.Result, bool) {
		cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, p.NS, r.bench(), "tcp-client", "-c", ServiceIP.String()+":80", "-bytes", "1000000")
		t, perr := ParseTransfer(out)
		return strings.TrimSpace(string(out)), t, err == nil && perr == nil && t.Intact
	}
	out, t, ok := try(client)
	if !ok && wait > 0 {
		ok = eventually(ctx, wait, time.Second, func() bool { out, t, ok = try(client); return ok })
	}
	if ok {
		res.Own, res.OwnReached = t, true
		r.printf("    %s (alpha) → alpha/web: %s\n", client.Name, out)
	} else {
		r.fail("an alpha pod did not reach its project's service: " + out)
	}
	if out, _, ok := try(other); ok {
		r.fail("a beta pod reached alpha's service: " + out)
	} else {
		res.OtherRefused = true
		why := "table 60: a pod reaches only its own project's and global services"
		if c.Spec.Mode == "networkpolicy" {
			why = "alpha's NetworkPolicy, judged at the backend after the host's DNAT"
		}
		r.printf("    %s (beta) → alpha/web: refused (%s)\n", other.Name, why)
	}
}
