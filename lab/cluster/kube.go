package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// ControlPlaneKube runs a real Kubernetes API server (internal/kubetest)
// in the first node's namespace, gvs-master in its Kubernetes mode against
// it, and the daemons following it with gvs-node's ServiceAccount
// (deploy/rbac.yaml). The cluster creates what kubelets and users would:
// a Node per node (with its InternalIP) and a Namespace per project.
const ControlPlaneKube = "kube"

// upKube brings the Kubernetes control plane up: API server, deploy/'s
// CRDs and RBAC, gvs-master, the Namespaces, and the Nodes one at a time
// (so that their HostSubnets come in the order the pods' addresses were
// planned in), and writes the kubeconfigs.
func (c *Cluster) upKube(ctx context.Context) error {
	n0 := c.Nodes[0]
	srv, err := kubetest.Start(ctx, kubetest.Options{Lab: c.Lab, NS: n0.NS, Addr: n0.IP, ServiceCIDR: c.Spec.ServiceNetwork})
	if err != nil {
		return err
	}
	c.Kube = srv
	if err := srv.Apply(ctx, kubetest.Manifests()...); err != nil {
		return err
	}
	net, err := networkv1.NewForConfig(srv.Admin())
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(srv.Admin())
	if err != nil {
		return err
	}
	if err := poll(ctx, 30*time.Second, func() error {
		_, err := net.NetNamespaces().List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("cluster: network.openshift.io not served: %w", err)
	}
	admin := filepath.Join(c.Lab.StateDir(), "admin.kubeconfig")
	if err := srv.WriteKubeconfig(admin, srv.Admin()); err != nil {
		return err
	}
	c.KubeAdmin = admin
	nodeCfg, err := srv.ServiceAccountConfig(ctx, "gvs", "gvs-node")
	if err != nil {
		return err
	}
	c.kubeNode = filepath.Join(c.Lab.StateDir(), "node.kubeconfig")
	if err := srv.WriteKubeconfig(c.kubeNode, nodeCfg); err != nil {
		return err
	}
	// Projects are Namespaces (gvs-master gives each its NetNamespace).
	var projects []string
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			if !slices.Contains(projects, p.Project) && p.Project != "default" {
				projects = append(projects, p.Project)
			}
		}
	}
	for _, p := range projects {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	c.masterArgs = []string{filepath.Join(c.Spec.BinDir, "gvs-master"), "--kubeconfig", admin,
		"--lease-namespace", "gvs", "--identity", "m1", "--mode", c.Spec.Mode,
		"--cluster-network", fmt.Sprintf("%s:%d", c.Spec.ClusterNetwork, c.Spec.HostSubnetBits),
		"--service-network", c.Spec.ServiceNetwork.String()}
	c.masterArgs = append(c.masterArgs, c.Spec.MasterArgs...)
	if err := c.StartMaster(ctx); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
		created, err := kc.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP.String()}}
		if _, err := kc.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return err
		}
		var hs *networkv1.HostSubnet
		if err := poll(ctx, 30*time.Second, func() (err error) {
			hs, err = net.HostSubnets().Get(ctx, n.Name)
			return err
		}); err != nil {
			log, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), "master.log"))
			return fmt.Errorf("cluster: no HostSubnet for %s: %w\n--- gvs-master's log ---\n%s", n.Name, err, log)
		}
		if hs.Subnet != n.Subnet.String() {
			return fmt.Errorf("cluster: %s got subnet %s, planned %s", n.Name, hs.Subnet, n.Subnet)
		}
	}
	for _, p := range projects {
		if err := poll(ctx, 30*time.Second, func() error {
			_, err := net.NetNamespaces().Get(ctx, p)
			return err
		}); err != nil {
			return fmt.Errorf("cluster: no NetNamespace for %s: %w", p, err)
		}
	}
	return c.RefreshVNIDs(ctx)
}

// PodLabels are the labels the cluster gives each pod's Pod object in
// Kubernetes mode: app is the pod's name, gvs.io/node its node's.
func PodLabels(p Pod, node string) map[string]string {
	return map[string]string{"app": p.Name, "gvs.io/node": node}
}

// createKubePods creates a Pod object for every lab pod, as the scheduler
// would: bound to its node, with PodLabels (the containers are never run:
// there is no kubelet). setKubePodIPs adds the addresses.
func (c *Cluster) createKubePods(ctx context.Context) error {
	kc, err := kubernetes.NewForConfig(c.Kube.Admin())
	if err != nil {
		return err
	}
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			// The ServiceAccount admission wants the pod's account; no
			// controller manager makes it here.
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: p.Project}}
			if _, err := kc.CoreV1().ServiceAccounts(p.Project).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Project, Labels: PodLabels(p, n.Name)},
				Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: "main", Image: "none"}}}}
			if _, err := kc.CoreV1().Pods(p.Project).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("cluster: pod %s: %w", p.Name, err)
			}
		}
	}
	return nil
}

// setKubePodIPs records every lab pod's address in its Pod's status, as
// the kubelet does once CNI ADD has answered.
func (c *Cluster) setKubePodIPs(ctx context.Context) error {
	kc, err := kubernetes.NewForConfig(c.Kube.Admin())
	if err != nil {
		return err
	}
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			pod, err := kc.CoreV1().Pods(p.Project).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("cluster: pod %s: %w", p.Name, err)
			}
			pod.Status.PodIP, pod.Status.PodIPs = p.IP.String(), []corev1.PodIP{{IP: p.IP.String()}}
			if _, err := kc.CoreV1().Pods(p.Project).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("cluster: pod %s status: %w", p.Name, err)
			}
		}
	}
	return nil
}

// kubeVNIDs reads the NetNamespaces' VNIDs.
func (c *Cluster) kubeVNIDs(ctx context.Context) (map[string]uint32, error) {
	net, err := networkv1.NewForConfig(c.Kube.Admin())
	if err != nil {
		return nil, err
	}
	l, err := net.NetNamespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]uint32{}
	for _, n := range l.Items {
		out[n.NetName] = n.NetID
	}
	return out, nil
}

// KubeCtl runs gvsctl with the administrator's kubeconfig in the first
// node's namespace (gvsctl --kubeconfig projects join …).
func (c *Cluster) KubeCtl(ctx context.Context, args ...string) ([]byte, error) {
	if c.Kube == nil {
		return nil, errors.New("cluster: no Kubernetes control plane")
	}
	argv := append([]string{filepath.Join(c.Spec.BinDir, "gvsctl"), "--kubeconfig", c.KubeAdmin}, args...)
	out, err := c.Lab.Exec(ctx, c.Nodes[0].NS, argv...)
	if err != nil {
		return out, fmt.Errorf("gvsctl %v: %w\n%s", args, err, out)
	}
	return out, nil
}

// poll calls f until it succeeds or d passes.
func poll(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
