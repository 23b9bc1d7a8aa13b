package main

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/lab/cluster"
)

// demoServices shows a Service of project alpha: the node DNATs its
// ClusterIP as kube-proxy does, an alpha pod reaches the backend on the
// other node (its replies come back through tun0 by connection state), and
// a beta pod is refused by the multitenant table 60. It returns what went
// wrong.
func demoServices(ctx context.Context, c *cluster.Cluster, bin string, step func(string)) []string {
	var bad []string
	clusterIP := netip.MustParseAddr("172.30.0.10")
	client, other, backend := c.Nodes[0].Pods[1], c.Nodes[0].Pods[2], c.Nodes[1].Pods[1] // alpha, beta on n1; alpha on n2
	wait := time.Duration(0)
	if c.Kube != nil {
		// The Service and its EndpointSlice through the API server; the
		// real kube-proxy DNATs the ClusterIP in every node; gvs-switchd
		// follows the Service for table 60.
		step(fmt.Sprintf("services: alpha/web at ClusterIP %s:80 → backend %s (%s:5201) on n2, created through the API server,\n    DNATed by the real kube-proxy (iptables mode, no --masquerade-all) in each node",
			clusterIP, backend.Name, backend.IP))
		kc, err := kubernetes.NewForConfig(c.Kube.Admin())
		if err != nil {
			return append(bad, err.Error())
		}
		if err := cluster.CreateKubeService(ctx, kc, "alpha", "web", clusterIP, backend.IP, 0); err != nil {
			return append(bad, err.Error())
		}
		stop, err := c.StartKubeProxy(ctx, c.KubeAdmin, "iptables")
		if err != nil {
			return append(bad, err.Error())
		}
		defer stop()
		wait = 45 * time.Second // kube-proxy's first sync
	} else {
		step(fmt.Sprintf("services: alpha/web at ClusterIP %s:80 → backend %s (%s:5201) on n2, DNATed by n1 as kube-proxy does",
			clusterIP, backend.Name, backend.IP))
		if out, err := c.RegistryCtl(ctx, "services", "set", "alpha/web", clusterIP.String(), "tcp/80"); err != nil {
			return append(bad, fmt.Sprintf("gvsctl services set: %v\n%s", err, out))
		}
		if err := c.ServiceDNAT(ctx, 0, clusterIP, "tcp", 80, netip.AddrPortFrom(backend.IP, 5201)); err != nil {
			return append(bad, err.Error())
		}
	}
	srv, err := c.Lab.Start(ctx, backend.NS, filepath.Join(c.Lab.StateDir(), "svc-tcp.log"), filepath.Join(bin, "gvs-bench"), "tcp-server", "-l", ":5201")
	if err != nil {
		return append(bad, err.Error())
	}
	defer srv.Stop()
	time.Sleep(300 * time.Millisecond)
	try := func(p cluster.Pod) (string, bool) {
		cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		out, err := c.Lab.Exec(cctx, p.NS, filepath.Join(bin, "gvs-bench"), "tcp-client", "-c", clusterIP.String()+":80", "-bytes", "1000000")
		return strings.TrimSpace(string(out)), err == nil && strings.Contains(string(out), "intact=true")
	}
	out, ok := try(client)
	for start := time.Now(); !ok && time.Since(start) < wait; out, ok = try(client) {
		time.Sleep(time.Second)
	}
	if ok {
		fmt.Printf("    %s (alpha) → alpha/web: %s\n", client.Name, out)
	} else {
		bad = append(bad, "an alpha pod did not reach its project's service: "+out)
	}
	if out, ok := try(other); ok {
		bad = append(bad, "a beta pod reached alpha's service: "+out)
	} else {
		why := "table 60: a pod reaches only its own project's and global services"
		if c.Spec.Mode == "networkpolicy" {
			why = "alpha's NetworkPolicy, judged at the backend after the host's DNAT"
		}
		fmt.Printf("    %s (beta) → alpha/web: refused (%s)\n", other.Name, why)
	}
	return bad
}
