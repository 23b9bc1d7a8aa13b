// Package cluster is the demo on real Kubernetes nodes (make demo
// MODE=cluster): two lab nodes, each with containerd, the kubelet and
// kube-proxy (internal/kubetest), gvs installed with kubectl, pods in two
// projects, and the reachability between them tried for real, before and
// after a NetworkPolicy.
//
// The way through Up:
//  1. remove what an earlier demo on Prefix left (Down);
//  2. make the lab and the cluster, install gvs in networkpolicy mode;
//  3. create a Deployment of agnhost in the projects alpha and beta, and a
//     Service in alpha;
//  4. print the nodes and pods, the reachability matrix, the Service;
//  5. apply a NetworkPolicy in beta that admits only its own project, and
//     print the matrix again;
//  6. print the kubectl commands to look around.
//
// The processes are started in their own process groups and recorded in the
// lab's state directory, so they outlive the command; Down stops exactly
// those and removes the namespaces, mounts, cgroups and directories
// (kubetest.DestroyCluster), also after a crash or a reboot half-way.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/lab"
)

// Prefix is the lab prefix of the cluster demo (the namespace-node demo
// uses "gvs-demo").
const Prefix = "gvsdemo-k"

// Underlay is the address range of the demo's underlay, inside its
// namespaces only.
var Underlay = netip.MustParsePrefix("192.168.246.0/24")

// Projects are the namespaces the demo's pods run in.
var Projects = []string{"alpha", "beta"}

// Config says how to run the demo. The zero value prints nowhere and uses
// Prefix.
type Config struct {
	// Prefix is the lab prefix (default Prefix).
	Prefix string
	// Out receives the demo's report (default io.Discard).
	Out io.Writer
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = Prefix
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Pod is a demo pod as the matrix names it.
type Pod struct {
	Project, Name, Node string
	IP                  netip.Addr
}

// Label returns the pod's short name in the matrix: project/node.
func (p Pod) Label() string { return p.Project + "/" + p.Node }

// Matrix is the reachability between pods: OK[i][j] says whether Pods[i]
// connected to Pods[j]'s port 8080.
type Matrix struct {
	Pods []Pod
	OK   [][]bool
}

// String prints the matrix as a table, rows the sources.
func (m Matrix) String() string {
	var b strings.Builder
	w := 0
	for _, p := range m.Pods {
		w = max(w, len(p.Label()))
	}
	fmt.Fprintf(&b, "%-*s", w+2, "from \\ to")
	for _, p := range m.Pods {
		fmt.Fprintf(&b, " %-*s", w, p.Label())
	}
	b.WriteString("\n")
	for i, p := range m.Pods {
		fmt.Fprintf(&b, "%-*s", w+2, p.Label())
		for j := range m.Pods {
			v := "-"
			if i != j {
				v = "ok"
				if !m.OK[i][j] {
					v = "BLOCKED"
				}
			}
			fmt.Fprintf(&b, " %-*s", w, v)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Demo is a running cluster demo.
type Demo struct {
	cfg     Config
	Cluster *kubetest.Cluster
}

// Up brings the demo up (see the package overview) and leaves it running.
// On an error it removes what it made.
func Up(ctx context.Context, cfg Config) (_ *Demo, err error) {
	cfg.defaults()
	if os.Geteuid() != 0 {
		return nil, errors.New("demo: the cluster demo makes network namespaces and cgroups: run it as root")
	}
	if m := kubetest.MissingForNodes(kubetest.BinDir()); len(m) > 0 {
		return nil, fmt.Errorf("demo: missing (make kube-tools kube-images image): %s", strings.Join(m, ", "))
	}
	_ = Down(cfg.Prefix) // an earlier demo that was not taken down
	defer func() {
		if err != nil {
			err = errors.Join(err, Down(cfg.Prefix))
		}
	}()
	step := func(s string) { fmt.Fprintf(cfg.Out, "==> %s\n", s) }
	step("two lab nodes, each with containerd, the kubelet and kube-proxy; the API server in the first")
	l, err := lab.Create(ctx, lab.Spec{Prefix: cfg.Prefix, Nodes: 2, Underlay: Underlay, External: true})
	if err != nil {
		return nil, err
	}
	c, err := kubetest.StartCluster(ctx, kubetest.ClusterOptions{Lab: l})
	if err != nil {
		return nil, err
	}
	d := &Demo{cfg: cfg, Cluster: c}
	step("kubectl apply -k deploy/ (gvs in networkpolicy mode)")
	if err := c.InstallGVS(ctx, "networkpolicy"); err != nil {
		return nil, err
	}
	step("a Deployment of agnhost in projects " + strings.Join(Projects, " and ") + ", a Service in " + Projects[0])
	if err := d.apply(ctx, "workloads.yaml", workloads()); err != nil {
		return nil, err
	}
	if _, err := d.kubectl(ctx, "wait", "--for=condition=Available", "--timeout=180s", "-n", Projects[0], "deployment/web"); err != nil {
		return nil, err
	}
	if _, err := d.kubectl(ctx, "wait", "--for=condition=Available", "--timeout=180s", "-n", Projects[1], "deployment/web"); err != nil {
		return nil, err
	}
	return d, nil
}

// Down removes the demo on prefix: its processes (by their recorded PIDs and
// the nodes' cgroups), namespaces, mounts, cgroups and directories. It is
// idempotent.
func Down(prefix string) error { return kubetest.DestroyCluster(prefix) }

// kubectl runs kubectl as the admin in the API server's namespace.
func (d *Demo) kubectl(ctx context.Context, args ...string) (string, error) {
	out, err := d.Cluster.Kubectl(ctx, args...)
	if err != nil {
		return string(out), fmt.Errorf("demo: kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// apply writes manifest to the lab's state directory and applies it.
func (d *Demo) apply(ctx context.Context, name, manifest string) error {
	f := filepath.Join(d.Cluster.Lab.StateDir(), name)
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	_, err := d.kubectl(ctx, "apply", "-f", f)
	return err
}

// Pods lists the demo's running pods, by project and node.
func (d *Demo) Pods(ctx context.Context) ([]Pod, error) {
	var out []Pod
	for _, ns := range Projects {
		list, err := d.Cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		for _, p := range list.Items {
			ip, err := netip.ParseAddr(p.Status.PodIP)
			if err != nil || p.DeletionTimestamp != nil {
				continue
			}
			out = append(out, Pod{Project: ns, Name: p.Name, Node: p.Spec.NodeName, IP: ip})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Label() < out[j].Label() })
	return out, nil
}

// Connect reports whether pod from opens a TCP connection to addr
// (agnhost connect, run in the pod with kubectl exec).
func (d *Demo) Connect(ctx context.Context, from Pod, addr string) bool {
	_, err := d.kubectl(ctx, "exec", "-n", from.Project, from.Name, "--", "/agnhost", "connect", "--timeout=2s", addr)
	return err == nil
}

// Reachability tries every pod to every other pod's port 8080.
func (d *Demo) Reachability(ctx context.Context) (Matrix, error) {
	pods, err := d.Pods(ctx)
	if err != nil {
		return Matrix{}, err
	}
	m := Matrix{Pods: pods, OK: make([][]bool, len(pods))}
	for i, src := range pods {
		m.OK[i] = make([]bool, len(pods))
		for j, dst := range pods {
			if i != j {
				m.OK[i][j] = d.Connect(ctx, src, netip.AddrPortFrom(dst.IP, 8080).String())
			}
		}
	}
	return m, nil
}

// Show prints the cluster, the matrix, the Service, then applies the
// NetworkPolicy and prints the matrix again, and the commands to look
// around. It returns the matrices before and after the policy.
func (d *Demo) Show(ctx context.Context) (before, after Matrix, err error) {
	out := d.cfg.Out
	step := func(s string) { fmt.Fprintf(out, "\n==> %s\n", s) }
	step("kubectl get nodes,pods -o wide")
	s, err := d.kubectl(ctx, "get", "nodes,pods", "-A", "-o", "wide")
	if err != nil {
		return before, after, err
	}
	fmt.Fprint(out, s)
	step("reachability (agnhost connect from each pod to each pod's :8080); networkpolicy mode admits all without a policy")
	if before, err = d.Reachability(ctx); err != nil {
		return before, after, err
	}
	fmt.Fprint(out, before)
	step("Service web." + Projects[0] + " by its ClusterIP, from each pod")
	svc, err := d.kubectl(ctx, "get", "service", "-n", Projects[0], "web", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		return before, after, err
	}
	for _, p := range before.Pods {
		v := "ok"
		if !d.Connect(ctx, p, svc+":80") {
			v = "BLOCKED"
		}
		fmt.Fprintf(out, "%-14s -> %s:80  %s\n", p.Label(), svc, v)
	}
	step("NetworkPolicy in " + Projects[1] + ": admit only pods of " + Projects[1])
	if err := d.apply(ctx, "policy.yaml", policy()); err != nil {
		return before, after, err
	}
	// gvs-node programs the policy asynchronously: measure again until
	// alpha's pods are refused by beta's (for at most 20 s); the matrix
	// printed is the last one measured, whatever it shows.
	for deadline := time.Now().Add(20 * time.Second); ; {
		if after, err = d.Reachability(ctx); err != nil {
			return before, after, err
		}
		if policyHolds(after) || time.Now().After(deadline) {
			break
		}
	}
	fmt.Fprint(out, after)
	// The demo starts no cluster DNS: the commands name the Service by its ClusterIP.
	step("look around (the API server listens inside the lab namespace " + d.Cluster.Server.NS + ")")
	kc := fmt.Sprintf("ip netns exec %s %s --kubeconfig %s", d.Cluster.Server.NS,
		filepath.Join(kubetest.BinDir(), kubetest.KubectlBinary), d.Cluster.Server.Kubeconfig)
	for _, a := range []string{"get nodes,pods -A -o wide", "get networkpolicy,service -A", "get netnamespaces,hostsubnets",
		"-n gvs logs ds/gvs-node", "-n " + Projects[0] + " exec deploy/web -- /agnhost connect --timeout=2s " + svc + ":80"} {
		fmt.Fprintf(out, "  %s %s\n", kc, a)
	}
	if d.cfg.Prefix == Prefix {
		fmt.Fprintln(out, "remove it all: make demo-down")
	} else {
		fmt.Fprintln(out, "remove it all: gvs-demo down -prefix "+d.cfg.Prefix)
	}
	return before, after, nil
}

// workloads returns the demo's namespaces, Deployments and Service.
func workloads() string {
	var b strings.Builder
	for _, ns := range Projects {
		fmt.Fprintf(&b, `apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %[1]s}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
      containers:
      - name: agnhost
        image: registry.k8s.io/e2e-test-images/agnhost:2.66.1
        imagePullPolicy: Never
        args: [netexec, --http-port=8080]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
`, ns)
	}
	fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata: {name: web, namespace: %s}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`, Projects[0])
	return b.String()
}

// policy returns a NetworkPolicy admitting only the project's own pods.
func policy() string {
	return fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: same-project-only, namespace: %s}
spec:
  podSelector: {}
  ingress:
  - from: [{podSelector: {}}]
`, Projects[1])
}

// policyHolds tells whether m shows the demo's policy in force: no pod of
// alpha reaches a pod of beta.
func policyHolds(m Matrix) bool {
	for i, from := range m.Pods {
		for j, to := range m.Pods {
			if i != j && from.Project == "alpha" && to.Project == "beta" && m.OK[i][j] {
				return false
			}
		}
	}
	return true
}
