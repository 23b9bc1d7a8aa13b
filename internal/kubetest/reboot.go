package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// RebootNode reboots nd as a machine reboots, under the same name and
// address: every process of the node ends at once (SIGKILL: the kubelet,
// containerd, the pods' containers, kube-proxy), its /run is emptied (a
// tmpfs on a host) while the rest of its files stay (/var/lib/kubelet,
// /var/lib/containerd with its images, /var/lib/gvs with the address
// leases, /etc/cni/net.d, /opt/cni/bin), its network namespace is torn down
// and made again (lab.RebuildNode: the pods' namespaces, TAPs, tun0, the
// VXLAN socket and every route and rule go with it), and the node boots:
// holder, containerd, kubelet, kube-proxy. It returns once the kubelet
// runs; the Node turns Ready again shortly after, and the kubelet
// recreates its pods. The node running the API server (the first) cannot
// be rebooted.
func (c *Cluster) RebootNode(ctx context.Context, nd *Node) error {
	if nd.NS == c.Server.NS {
		return fmt.Errorf("kubetest: node %s runs the API server and cannot be rebooted", nd.Name)
	}
	// Power off: every process of the node killed at once (the kubelet,
	// containerd and kube-proxy are in its system cgroup), none told first.
	errs := []error{killCgroup(nd.CgroupRoot)}
	if nd.kubelet != nil {
		errs = append(errs, nd.kubelet.Stop())
	}
	if nd.containerd != nil {
		errs = append(errs, nd.containerd.Stop())
	}
	if nd.holder != nil {
		errs = append(errs, nd.holder.Stop())
	}
	errs = append(errs, removeCgroup(nd.CgroupRoot))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kubetest: node %s: power off: %w", nd.Name, err)
	}
	nd.kubelet, nd.containerd, nd.holder = nil, nil, nil
	run := filepath.Join(nd.Dir, "root", "run")
	if err := os.RemoveAll(run); err != nil {
		return fmt.Errorf("kubetest: node %s: emptying /run: %w", nd.Name, err)
	}
	if err := c.Lab.RebuildNode(ctx, nd.Name); err != nil {
		return fmt.Errorf("kubetest: node %s: %w", nd.Name, err)
	}
	// Boot.
	if out, err := c.Lab.Exec(ctx, nd.NS, "ip", "route", "replace", "default", "via", c.Lab.External.IP.String()); err != nil {
		return fmt.Errorf("kubetest: node %s: default route: %w: %s", nd.Name, err, out)
	}
	if err := nd.startHolder(ctx); err != nil {
		return err
	}
	if err := nd.startContainerd(ctx); err != nil {
		return err
	}
	if err := nd.StartKubelet(ctx); err != nil {
		return err
	}
	return nd.StartKubeProxy(ctx, c.proxyMode)
}
