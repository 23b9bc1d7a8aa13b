package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/internal/daemon/etcdsource"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
)

// follower is the control plane the node follows, once started (src nil
// without one), the configuration as it completed it (filled), and the
// node's etcd identity (regTLS, nil without TLS).
type follower struct {
	cfg    *Config // the daemon's own copy, never written (New)
	log    *slog.Logger
	src    source.ControlPlane
	filled atomic.Pointer[Config] // cfg with the control plane's answer; nil before it
	regTLS atomic.Pointer[pki.Client]
}

// config returns the configuration with what the control plane filled in
// (Config.filledFrom), or as configured before it answered or without one.
// Neither may be written.
func (f *follower) config() *Config {
	if c := f.filled.Load(); c != nil {
		return c
	}
	return f.cfg
}

// registrySource is the etcd registry as the node follows it: it asks for
// the subnet the configuration names, or else for the one it had before a
// restart.
func (f *follower) registrySource() (source.ControlPlane, error) {
	dc := f.cfg.dialConfig(f.log)
	if !dc.TLS.IsZero() {
		tc, err := dc.TLS.NewClient()
		if err != nil {
			return nil, fmt.Errorf("etcdTLS: %w", err)
		}
		dc.Client = tc
		f.regTLS.Store(tc)
	}
	ip, err := netip.ParseAddr(f.cfg.NodeIP)
	if err != nil {
		return nil, fmt.Errorf("nodeIP: %w", err)
	}
	sc := etcdsource.Config{Dial: dc, Node: registry.Node{Name: f.cfg.NodeName, IP: ip},
		Logger: f.log.With("component", "agent")}
	if f.cfg.Subnet != "" {
		if sc.Want, err = netip.ParsePrefix(f.cfg.Subnet); err != nil {
			return nil, fmt.Errorf("subnet: %w", err)
		}
	} else if p, ok := f.cfg.rememberedSubnet(); ok {
		sc.Want, sc.Remembered = p, true // ask for it back after a restart past the lease
	}
	return etcdsource.New(sc), nil
}

// podsChanged is told of every pod attached or detached.
func (f *follower) podsChanged() {
	if p, ok := f.src.(source.PodPublisher); ok {
		p.PodsChanged()
	}
}

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
// On success d.cp.src is set, and Run closes it; on failure it is closed.
func (d *Daemon) startControlPlane(ctx context.Context) (err error) {
	cp, from, err := d.cp.controlPlane()
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
	filled := d.cfg.filledFrom(b.Cluster, b.Subnet)
	d.node.startSubnet(b.Subnet, b.Lost)
	n, err := filled.Node()
	if err != nil {
		return fmt.Errorf("configuration from %s: %w", from, err)
	}
	d.cp.filled.Store(filled)
	if err := d.init(n, b.Projects, false); err != nil {
		return err
	}
	if r, ok := cp.(source.ProjectRequester); ok {
		d.node.vnids.setRequester(r.RequestProject)
	} else {
		// Kubernetes: gvs-master gives every Namespace a NetNamespace; a
		// pod of a Namespace that has none yet waits a while for it.
		d.node.vnids.setFollows()
	}
	d.cp.src = cp
	go d.node.egress.follow(ctx)
	cp.Follow(ctx, d.node)
	if n.Mode.Canonical() == sdn.ModeNetworkPolicy {
		start := time.Now()
		if !cp.WaitForSync(ctx) {
			return fmt.Errorf("%s: policies, labels and pod addresses not listed: %w", from, ctx.Err())
		}
		d.log.Info(from+": policies, labels and pod addresses listed", "took", time.Since(start).Round(time.Millisecond))
	}
	if p, ok := cp.(source.PodPublisher); ok {
		p.PublishPods(d.node.podAddresses)
	}
	return nil
}

// controlPlane returns the control plane the configuration names, and
// what to call it in messages.
func (f *follower) controlPlane() (source.ControlPlane, string, error) {
	if f.cfg.FromKubernetes() {
		cp, err := f.kubeSource()
		return cp, "the API server", err
	}
	cp, err := f.registrySource()
	return cp, "the registry", err
}

// filledFrom returns a copy of c with the node's subnet the control plane
// gave, and what c leaves out taken from the control plane's
// configuration; c is left as it is.
func (c *Config) filledFrom(cl source.Cluster, subnet netip.Prefix) *Config {
	f := c.clone()
	if len(f.ClusterNetworks) == 0 {
		for _, cn := range cl.ClusterNetworks {
			f.ClusterNetworks = append(f.ClusterNetworks, cn.String())
		}
	}
	if f.ServiceNetwork == "" && cl.ServiceNetwork.IsValid() {
		f.ServiceNetwork = cl.ServiceNetwork.String()
	}
	if f.Mode == "" {
		f.Mode = string(cl.Mode)
	}
	if f.VXLANPort == 0 {
		f.VXLANPort = cl.VXLANPort
	}
	f.Subnet = subnet.String()
	return f
}

// registryInfo describes the node's connection to etcd (nil without one).
func (f *follower) registryInfo() *control.Registry {
	if !f.cfg.FromRegistry() {
		return nil
	}
	r := &control.Registry{Endpoints: f.cfg.EtcdEndpoints, Insecure: f.cfg.EtcdInsecure}
	if c := f.regTLS.Load(); c != nil {
		if cert := c.Presented(); cert != nil {
			r.Identity, r.CertSerial, r.CertNotAfter = cert.Subject.CommonName, cert.SerialNumber.Text(16), cert.NotAfter
		}
	}
	if r.Identity == "" && !r.Insecure {
		r.Identity = pki.NodeUser(f.cfg.NodeName)
	}
	return r
}
