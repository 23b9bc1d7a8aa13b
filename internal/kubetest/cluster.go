package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/lab"
)

// The cluster network and service network of a real-node cluster
// (deploy/'s defaults); the underlay must not overlap them.
var (
	ClusterCIDR = netip.MustParsePrefix("10.128.0.0/14")
	ServiceCIDR = netip.MustParsePrefix(DefaultServiceCIDR)
)

// ClusterOptions says how to make a real-node cluster.
type ClusterOptions struct {
	// Lab is the lab to use: its nodes become Kubernetes nodes, the API
	// server and the controllers run in the first. It needs an external
	// host (Spec.External): the nodes' default route points at it, as a
	// real node's points at its gateway, so that a node reaches the
	// kubernetes Service's ClusterIP before gvs has made any route (the
	// external host forwards nothing: traffic to any address outside the
	// lab ends there).
	Lab *lab.Lab
	// Images are OCI archives each node imports (default: Images()).
	Images []string
	// ProxyMode is kube-proxy's mode (default iptables).
	ProxyMode string
}

// Cluster is a Kubernetes cluster on a lab: API server, controller
// manager, scheduler, and on every node containerd, the kubelet and
// kube-proxy. gvs is not in it until installed (InstallGVS).
type Cluster struct {
	Lab    *lab.Lab
	Server *Server
	Nodes  []*Node
	// Client is an admin client.
	Client kubernetes.Interface
}

// ImageArchives returns the OCI archives a real-node cluster's nodes import:
// gvs's image (make image) and the lab's (make kube-images: pause,
// agnhost, busybox, glibc-dns-testing, coredns).
func ImageArchives() []string {
	bin := filepath.Join(RepoRoot(), "bin")
	out := []string{filepath.Join(bin, "gvs-image.tar")}
	for _, f := range []string{"pause.tar", "agnhost.tar", "busybox.tar", "glibc-dns-testing.tar", "coredns.tar"} {
		out = append(out, filepath.Join(bin, "images", f))
	}
	return out
}

// MissingForNodes returns what a real-node cluster needs that is not
// there: binaries (make kube-tools), image archives (make image
// kube-images) and Debian's containerd.
func MissingForNodes(binDir string) []string {
	out := Missing(binDir)
	for _, b := range []string{KubeletBinary, ControllerManagerBinary, SchedulerBinary, KubectlBinary, KubeProxyBinary} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			out = append(out, filepath.Join(binDir, b))
		}
	}
	for _, p := range append(ImageArchives(), ContainerdBinary, CtrBinary, "/usr/sbin/runc") {
		if _, err := os.Stat(p); err != nil {
			out = append(out, p)
		}
	}
	return out
}

// StartCluster brings a real-node cluster up and waits until every Node
// has registered (they stay NotReady until a network plug-in writes its
// CNI configuration). The kubelets' clusterDNS is DNSServiceIP, where
// StartDNS puts the cluster DNS.
func StartCluster(ctx context.Context, o ClusterOptions) (_ *Cluster, err error) {
	l := o.Lab
	if l == nil || l.External == nil || len(l.Nodes) == 0 {
		return nil, errors.New("kubetest: StartCluster needs a lab with nodes and an external host")
	}
	if l.Underlay.Overlaps(ClusterCIDR) || l.Underlay.Overlaps(ServiceCIDR) {
		return nil, fmt.Errorf("kubetest: underlay %s overlaps the cluster or service network", l.Underlay)
	}
	if o.Images == nil {
		o.Images = ImageArchives()
	}
	if o.ProxyMode == "" {
		o.ProxyMode = "iptables"
	}
	c := &Cluster{Lab: l}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
		}
	}()
	for _, n := range l.Nodes {
		if out, err := l.Exec(ctx, n.NS, "ip", "route", "replace", "default", "via", l.External.IP.String()); err != nil {
			return nil, fmt.Errorf("kubetest: default route in %s: %w: %s", n.NS, err, out)
		}
	}
	n0 := l.Nodes[0]
	if c.Server, err = Start(ctx, Options{Lab: l, NS: n0.NS, Addr: n0.IP, ServiceCIDR: ServiceCIDR, Kubelets: true}); err != nil {
		return nil, err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Server.Admin()); err != nil {
		return nil, err
	}
	if err := c.Server.StartControllers(ctx); err != nil {
		return nil, err
	}
	for _, n := range l.Nodes {
		nd, err := c.Server.StartNode(ctx, n, NodeOptions{Images: o.Images, ClusterDNS: DNSServiceIP})
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, nd)
		if err := nd.StartKubeProxy(ctx, o.ProxyMode); err != nil {
			return nil, err
		}
	}
	return c, c.waitNodes(ctx, false)
}

// waitNodes waits until every node's Node exists (and is Ready, if ready).
func (c *Cluster) waitNodes(ctx context.Context, ready bool) error {
	for {
		list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		n := 0
		if err == nil {
			for _, nd := range list.Items {
				if !ready || nodeReady(&nd) {
					n++
				}
			}
		}
		if n == len(c.Nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			what := "registered"
			if ready {
				what = "Ready"
			}
			return fmt.Errorf("kubetest: %d of %d nodes %s: %w (last error %v)\n%s", n, len(c.Nodes), what, ctx.Err(), err, c.logTails())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Kubectl runs kubectl (built from the module) as the admin in the API
// server's namespace and returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	argv := append([]string{filepath.Join(c.Server.opts.BinDir, KubectlBinary), "--kubeconfig", c.Server.Kubeconfig}, args...)
	return c.Lab.Exec(ctx, c.Server.NS, argv...)
}

// InstallGVS installs gvs as an administrator does, `kubectl apply -k
// deploy/`, and waits until gvs-master's Deployment is available,
// gvs-node's DaemonSet runs on every node and every Node is Ready. A mode
// other than deploy/'s (multitenant) is set as an administrator would, with
// a kustomization over deploy/ that patches gvs-master's --mode.
func (c *Cluster) InstallGVS(ctx context.Context, mode string) error {
	dir := filepath.Join(RepoRoot(), "deploy")
	if mode != "" && mode != "multitenant" {
		var err error
		if dir, err = c.overlay(mode); err != nil {
			return err
		}
	}
	if out, err := c.Kubectl(ctx, "apply", "-k", dir); err != nil {
		return fmt.Errorf("kubetest: kubectl apply -k %s: %w\n%s", dir, err, out)
	}
	for {
		ds, err1 := c.Client.AppsV1().DaemonSets("gvs").Get(ctx, "gvs-node", metav1.GetOptions{})
		dep, err2 := c.Client.AppsV1().Deployments("gvs").Get(ctx, "gvs-master", metav1.GetOptions{})
		if err1 == nil && err2 == nil && daemonSetReady(ds, len(c.Nodes)) && dep.Status.AvailableReplicas >= 1 {
			break
		}
		select {
		case <-ctx.Done():
			out, _ := c.Kubectl(context.Background(), "get", "-A", "pods,ds,deploy", "-o", "wide")
			return fmt.Errorf("kubetest: gvs not running: %w\n%s\n%s", ctx.Err(), out, c.logTails())
		case <-time.After(500 * time.Millisecond):
		}
	}
	return c.waitNodes(ctx, true)
}

// overlayKustomization patches deploy/'s gvs-master to another mode; the
// test op makes it fail loudly if deploy/ moves the argument.
const overlayKustomization = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
patches:
- target: {kind: Deployment, name: gvs-master}
  patch: |-
    - op: test
      path: /spec/template/spec/containers/0/args/2
      value: --mode=multitenant
    - op: replace
      path: /spec/template/spec/containers/0/args/2
      value: --mode=%s
`

// overlay writes a kustomization over deploy/ for mode and returns its
// directory. Kustomize takes bases by relative path only.
func (c *Cluster) overlay(mode string) (string, error) {
	dir := filepath.Join(NodeRoot, c.Lab.Prefix, "install-"+mode)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	base, err := filepath.Rel(dir, filepath.Join(RepoRoot(), "deploy"))
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), fmt.Appendf(nil, overlayKustomization, base, mode), 0o644)
}

func daemonSetReady(ds *appsv1.DaemonSet, nodes int) bool {
	s := ds.Status
	return s.ObservedGeneration == ds.Generation && int(s.NumberReady) == nodes && int(s.UpdatedNumberScheduled) == nodes
}

// logTails returns the end of the controllers' logs and of each node's
// kubelet and containerd logs.
func (c *Cluster) logTails() string {
	var s string
	if c.Server != nil {
		for _, f := range []string{"kube-controller-manager", "kube-scheduler"} {
			s += fmt.Sprintf("--- %s\n%s\n", f, tail(filepath.Join(c.Server.Dir, f+".log"), 15))
		}
	}
	for _, nd := range c.Nodes {
		for _, f := range []string{"kubelet", "containerd"} {
			s += fmt.Sprintf("--- %s %s\n%s\n", nd.Name, f, tail(filepath.Join(nd.Dir, f+".log"), 15))
		}
	}
	return s
}

// Stop stops every node, the controllers and the API server. The lab
// stays (its owner destroys it).
func (c *Cluster) Stop() error {
	var errs []error
	for _, nd := range c.Nodes {
		errs = append(errs, nd.Stop())
	}
	if c.Server != nil {
		errs = append(errs, c.Server.Stop())
	}
	return errors.Join(errs...)
}
