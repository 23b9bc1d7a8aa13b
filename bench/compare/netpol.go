package compare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// NetpolPolicies is how many NetworkPolicies the networkpolicy row loads
// by default (Config.NetpolPolicies).
const NetpolPolicies = 100

// netpolProject is the project (namespace) of the networkpolicy rows'
// pods.
const netpolProject = "bench"

// netpolYAML returns the policies of the networkpolicy rows, as an
// administrator would apply them (gvsctl policy apply -f): n policies in
// the pods' namespace. Most select the destination (app=dst) and admit
// other clients on other ports, some limit the source's (app=src) egress to
// blocks elsewhere, so both pods carry long rule lists; one admits the
// measured traffic both ways (TCP to port tcpPort from app=src to app=dst).
// Everything else between the pods is denied (ICMP included).
func netpolYAML(n int) string {
	n = max(n, 1)
	var b strings.Builder
	doc := func(name, spec string) {
		fmt.Fprintf(&b, "---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: %s, namespace: %s}\nspec:\n%s", name, netpolProject, spec)
	}
	egress := n / 10
	for i := range n - 1 {
		if i < egress {
			doc(fmt.Sprintf("egress-%d", i), fmt.Sprintf(`  podSelector: {matchLabels: {app: src}}
  policyTypes: [Egress]
  egress:
  - to:
    - ipBlock: {cidr: 172.%d.%d.0/24}
    ports:
    - {protocol: UDP, port: %d}
`, 16+i/200, i%200, 20000+i))
			continue
		}
		doc(fmt.Sprintf("ingress-%d", i), fmt.Sprintf(`  podSelector: {matchLabels: {app: dst}}
  ingress:
  - from:
    - podSelector: {matchLabels: {client: c%d}}
    - namespaceSelector: {matchLabels: {team: t%d}}
    ports:
    - {protocol: TCP, port: %d}
    - {protocol: UDP, port: %d, endPort: %d}
`, i, i, 10000+i, 30000+16*i, 30000+16*i+15))
	}
	doc("bench", fmt.Sprintf(`  podSelector: {}
  policyTypes: [Ingress, Egress]
  ingress:
  - from:
    - podSelector: {matchLabels: {app: src}}
    ports:
    - {protocol: TCP, port: %d}
  egress:
  - to:
    - podSelector: {matchLabels: {app: dst}}
    ports:
    - {protocol: TCP, port: %d}
`, tcpPort, tcpPort))
	return b.String()
}

// runNetpol measures TCP 1 stream on gvs in the networkpolicy mode, with
// NetpolPolicies policies selecting both ends: a cluster of its own (the
// mode is the cluster's) with gvs-master and its embedded etcd, the
// policies and labels applied with gvsctl as an administrator would. It is
// run number run of the row: Run interleaves it with the dataplanes' runs,
// each on a cluster of its own.
func runNetpol(ctx context.Context, cfg Config, run int, p *progress) (float64, error) {
	p.printf("gvs networkpolicy run %d/%d: bringing up 2 nodes × 2 pods, gvs-master, %d policies", run, cfg.Runs, cfg.NetpolPolicies)
	prefix := fmt.Sprintf("%sn%d", cfg.Prefix, os.Getpid()%100000)
	uctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	c, err := cluster.Up(uctx, cfg.gvsSettings(cluster.Spec{
		Lab:          lab.Spec{Prefix: prefix, Nodes: 2, PodsPerNode: 2, Underlay: cfg.Underlay, Projects: []string{netpolProject}},
		Mode:         "networkpolicy",
		ControlPlane: cluster.ControlPlaneEmbedded,
		BinDir:       cfg.BinDir,
	}))
	cancel()
	if err != nil {
		return 0, err
	}
	defer func() {
		if err := c.Down(); err != nil {
			p.printf("gvs networkpolicy: tearing down: %v", err)
		}
	}()
	e := &env{c: c, cfg: cfg, dp: "gvs networkpolicy", p: p}
	if err := e.warmUp(ctx); err != nil {
		return 0, err
	}
	src, dst := e.pods(0)
	for _, l := range []struct{ pod, label string }{{src.Name, "app=src"}, {dst.Name, "app=dst"}} {
		if out, err := c.RegistryCtl(ctx, "label", "pod", netpolProject+"/"+l.pod, l.label); err != nil {
			return 0, fmt.Errorf("%w\n%s", err, out)
		}
	}
	f := filepath.Join(c.Lab.StateDir(), "policies.yaml")
	if err := os.WriteFile(f, []byte(netpolYAML(cfg.NetpolPolicies)), 0o600); err != nil {
		return 0, err
	}
	if out, err := c.RegistryCtl(ctx, "policy", "apply", "-f", f); err != nil {
		return 0, fmt.Errorf("%w\n%s", err, out)
	}
	// Enforced on both nodes: ping between the pods is refused.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := lab.Ping(ctx, c.Lab, src.NS, dst.IP, 0, 1); err != nil {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the %d policies were not enforced within 30 s (ping %s → %s passes)", cfg.NetpolPolicies, src.Name, dst.IP)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.printf("gvs networkpolicy run %d/%d: TCP, 1 stream, %d policies", run, cfg.Runs, cfg.NetpolPolicies)
	return e.tcp(ctx, src, dst, 1, cfg.Duration)
}
