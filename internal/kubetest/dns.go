package kubetest

import (
	"context"
	_ "embed"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DNSServiceIP is the ClusterIP of the lab's DNS Service (kube-system/kube-dns),
// the kubelets' clusterDNS; ClusterDomain is their clusterDomain.
var DNSServiceIP = netip.MustParseAddr("172.30.0.10")

// ClusterDomain is the cluster's DNS domain, the kubelets' clusterDomain.
const ClusterDomain = "cluster.local"

// CoreDNSRef is the reference of the CoreDNS image (make kube-images:
// coredns.tar, built from tools/coredns); coredns.yaml names it.
const CoreDNSRef = "registry.k8s.io/coredns/coredns:v1.15.0"

//go:embed coredns.yaml
var corednsManifest []byte

// StartDNS deploys the cluster DNS (coredns.yaml: CoreDNS in kube-system
// behind the Service kube-dns at DNSServiceIP) and waits until it is
// ready. The pod network must be up (InstallGVS) for the pod to start.
func (c *Cluster) StartDNS(ctx context.Context) error {
	dir := filepath.Join(NodeRoot, c.Lab.Prefix)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, "coredns.yaml")
	if err := os.WriteFile(file, corednsManifest, 0o644); err != nil {
		return err
	}
	if err := c.Server.Apply(ctx, file); err != nil {
		return fmt.Errorf("kubetest: cluster DNS: %w", err)
	}
	for {
		dep, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err == nil && dep.Status.ReadyReplicas >= 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			out, _ := c.Kubectl(context.Background(), "describe", "-n", "kube-system", "pods")
			return fmt.Errorf("kubetest: cluster DNS not ready: %w\n%s", ctx.Err(), out)
		case <-time.After(300 * time.Millisecond):
		}
	}
}
