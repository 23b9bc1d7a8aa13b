package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
)

// startControlPlane starts the node with its control plane, the etcd
// registry (registrySource) or a Kubernetes API server (kubeSource), the
// same way for both:
//
//  1. Start: the control plane's configuration, this node's subnet, the
//     projects' VNIDs;
//  2. the configuration's gaps are filled from the control plane's, and
//     the rule program, VNID waiter and pod manager made (init);
//  3. egress firewalls' DNS names are followed, and the control plane
//     (Follow) before the static pods are attached, which wait for their
//     projects' VNIDs;
//  4. in networkpolicy mode, every policy, label and pod address is
//     listed before any pod is adopted or attached (fail closed: a pod
//     must not run outside the policies that select it);
//  5. the local pods' addresses are published, where the control plane
//     takes them (source.PodPublisher).
//
// On success d.cp is set, and Run closes it; on failure it is closed.
func (d *Daemon) startControlPlane(ctx context.Context) (err error) {
	cp, from, err := d.controlPlane()
	if err != nil {
		return err
	}
	b, err := cp.Start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cp.Close()
		}
	}()
	d.fillFrom(b.Cluster)
	if b.Lost.IsValid() {
		d.subnet.previous, d.subnet.changes = b.Lost, 1
	}
	d.cfg.Subnet = b.Subnet.String()
	d.rememberSubnet(b.Subnet)
	n, err := d.cfg.Node()
	if err != nil {
		return fmt.Errorf("configuration from %s: %w", from, err)
	}
	if err := d.init(n, b.Projects, false); err != nil {
		return err
	}
	if r, ok := cp.(source.ProjectRequester); ok {
		d.vnids.setRequester(r.RequestProject)
	}
	d.cp = cp
	go d.egress.follow(ctx)
	cp.Follow(ctx, d)
	if n.Mode.Canonical() == sdn.ModeNetworkPolicy {
		start := time.Now()
		if !cp.WaitForSync(ctx) {
			return fmt.Errorf("%s: policies, labels and pod addresses not listed: %w", from, ctx.Err())
		}
		d.log.Info(from+": policies, labels and pod addresses listed", "took", time.Since(start).Round(time.Millisecond))
	}
	if p, ok := cp.(source.PodPublisher); ok {
		p.PublishPods(d.podAddresses)
	}
	return nil
}

// controlPlane returns the control plane the configuration names, and
// what to call it in messages.
func (d *Daemon) controlPlane() (source.ControlPlane, string, error) {
	if d.cfg.FromKubernetes() {
		cp, err := d.kubeSource()
		return cp, "the API server", err
	}
	cp, err := d.registrySource()
	return cp, "the registry", err
}

// fillFrom takes what the configuration leaves out from the control
// plane's.
func (d *Daemon) fillFrom(c source.Cluster) {
	if len(d.cfg.ClusterNetworks) == 0 {
		for _, cn := range c.ClusterNetworks {
			d.cfg.ClusterNetworks = append(d.cfg.ClusterNetworks, cn.String())
		}
	}
	if d.cfg.ServiceNetwork == "" && c.ServiceNetwork.IsValid() {
		d.cfg.ServiceNetwork = c.ServiceNetwork.String()
	}
	if d.cfg.Mode == "" {
		d.cfg.Mode = string(c.Mode)
	}
	if d.cfg.VXLANPort == 0 {
		d.cfg.VXLANPort = c.VXLANPort
	}
}
