package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/gvswitch/gvs/internal/daemon/kubesource"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube"
)

// startKube waits for the node's HostSubnet on the API server, completes
// the configuration from the ClusterNetwork, makes the rule program and
// starts following the API server (internal/daemon/kubesource). In this
// mode gvs-master gives every Namespace its NetNamespace; a pod of a
// Namespace without one waits for it (vnidWait) and fails closed.
func (d *Daemon) startKube(ctx context.Context) error {
	path := d.cfg.Kubeconfig
	if path == InCluster {
		path = ""
	}
	rc, err := kube.RESTConfig(path)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	src, b, err := kubesource.Start(ctx, kubesource.Config{REST: rc, Node: d.cfg.NodeName,
		Logger: d.log.With("component", "kubernetes")})
	if err != nil {
		return err
	}
	if len(d.cfg.ClusterNetworks) == 0 {
		for _, cn := range b.Cluster.ClusterNetworks {
			d.cfg.ClusterNetworks = append(d.cfg.ClusterNetworks, cn.String())
		}
	}
	if d.cfg.ServiceNetwork == "" {
		d.cfg.ServiceNetwork = b.Cluster.ServiceNetwork.String()
	}
	if d.cfg.Mode == "" {
		d.cfg.Mode = string(b.Cluster.Mode)
	}
	if d.cfg.VXLANPort == 0 {
		d.cfg.VXLANPort = b.Cluster.VXLANPort
	}
	d.cfg.Subnet = b.Subnet.String()
	n, err := d.cfg.Node()
	if err != nil {
		return fmt.Errorf("configuration from the API server: %w", err)
	}
	if err := d.init(n, b.Projects, false); err != nil {
		return err
	}
	d.kube = src
	go d.egress.follow(ctx)
	src.Follow(ctx, d)
	if n.Mode.Canonical() == sdn.ModeNetworkPolicy {
		// Every policy, pod and namespace label before any pod is adopted
		// or attached (fail closed: a pod must not run outside the
		// policies that select it).
		start := time.Now()
		if !src.WaitForSync(ctx) {
			return fmt.Errorf("kubernetes: policies, pods and namespaces not listed: %w", ctx.Err())
		}
		d.log.Info("kubernetes: policies, pods and namespaces listed", "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
