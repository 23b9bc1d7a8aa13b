// Package kubesource is gvs-switchd's Kubernetes source: the node follows
// a real API server instead of gvs's etcd registry, reading OpenShift
// SDN's objects that gvs-master keeps there (network.openshift.io/v1:
// the ClusterNetwork "default", HostSubnets, NetNamespaces) and the
// Services and, with a LabelSink, Namespaces and Pods; it translates them
// into the calls of a source.Mirror, which drives the node as it does for
// the etcd follower (internal/daemon/etcdsource). It only reads (the gvs-node
// ClusterRole of deploy/rbac.yaml): subnets and VNIDs are gvs-master's to
// give. While the API server is unreachable the informers retry and the
// node keeps forwarding on what it last saw; what changed meanwhile
// arrives when it is back.
package kubesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/netpol"
)

// Config says how a node follows the API server.
type Config struct {
	// REST reaches the API server with the node's credentials.
	REST *rest.Config
	// Node is this node's name: its HostSubnet's.
	Node   string
	Logger *slog.Logger
}

// Follower follows the API server for one node (a source.ControlPlane).
type Follower struct {
	cfg  Config
	log  *slog.Logger
	net  *networkv1.Client
	kc   kubernetes.Interface
	ctx  context.Context // Follow's
	stop context.CancelFunc

	mode   sdn.Mode               // the ClusterNetwork's at start
	subnet netip.Prefix           // the node's at start
	synced []cache.InformerSynced // the informers Follow started
	// remotes: the HostSubnet, NetNamespace and Service handlers have
	// been given the first full list (WaitForRemotes).
	remotes []cache.InformerSynced
	m       *source.Mirror // Follow's
	// pods is Follow's pod informer (PodBandwidth reads it).
	pods cache.SharedIndexInformer
}

var _ source.ControlPlane = (*Follower)(nil)

// ParseClusterNetwork reads a ClusterNetwork.
func ParseClusterNetwork(cn *networkv1.ClusterNetwork) (source.Cluster, error) {
	var c source.Cluster
	for _, e := range cn.ClusterNetworks {
		p, err := netip.ParsePrefix(e.CIDR)
		if err != nil {
			return c, fmt.Errorf("ClusterNetwork %s: cluster network %q: %w", cn.Name, e.CIDR, err)
		}
		c.ClusterNetworks = append(c.ClusterNetworks, p.Masked())
	}
	if len(c.ClusterNetworks) == 0 && cn.Network != "" {
		p, err := netip.ParsePrefix(cn.Network)
		if err != nil {
			return c, fmt.Errorf("ClusterNetwork %s: network %q: %w", cn.Name, cn.Network, err)
		}
		c.ClusterNetworks = append(c.ClusterNetworks, p.Masked())
	}
	if len(c.ClusterNetworks) == 0 {
		return c, fmt.Errorf("ClusterNetwork %s has no cluster network", cn.Name)
	}
	var err error
	if c.ServiceNetwork, err = netip.ParsePrefix(cn.ServiceNetwork); err != nil {
		return c, fmt.Errorf("ClusterNetwork %s: service network %q: %w", cn.Name, cn.ServiceNetwork, err)
	}
	if c.Mode, err = sdn.ParseMode(cn.PluginName); err != nil {
		return c, fmt.Errorf("ClusterNetwork %s: %w", cn.Name, err)
	}
	c.VXLANPort = sdn.VXLANPort
	if cn.VXLANPort != nil {
		if *cn.VXLANPort == 0 || *cn.VXLANPort > 65535 {
			return c, fmt.Errorf("ClusterNetwork %s: vxlanPort %d", cn.Name, *cn.VXLANPort)
		}
		c.VXLANPort = uint16(*cn.VXLANPort)
	}
	return c, nil
}

// parseHostSubnet reads a HostSubnet's address and subnet.
func parseHostSubnet(hs *networkv1.HostSubnet) (netip.Addr, netip.Prefix, error) {
	ip, err := netip.ParseAddr(hs.HostIP)
	if err != nil || !ip.Is4() {
		return ip, netip.Prefix{}, fmt.Errorf("HostSubnet %s: hostIP %q is not IPv4", hs.Name, hs.HostIP)
	}
	sub, err := netip.ParsePrefix(hs.Subnet)
	if err != nil {
		return ip, sub, fmt.Errorf("HostSubnet %s: subnet %q: %w", hs.Name, hs.Subnet, err)
	}
	return ip, sub.Masked(), nil
}

// New returns a follower of the API server for cfg; Start connects.
func New(cfg Config) *Follower {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Follower{cfg: cfg, log: log}
}

// Start connects to the API server, waits for gvs-master's ClusterNetwork
// and this node's HostSubnet (gvs-master makes it when the Node appears),
// and reads the NetNamespaces. The node then calls Follow.
func (f *Follower) Start(ctx context.Context) (source.Bootstrap, error) {
	var b source.Bootstrap
	cfg := f.cfg
	if cfg.REST == nil || cfg.Node == "" {
		return b, errors.New("kubesource: Config.REST and Config.Node are required")
	}
	netc, err := networkv1.NewForConfig(cfg.REST)
	if err != nil {
		return b, err
	}
	kc, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return b, err
	}
	f.net, f.kc = netc, kc
	var cn *networkv1.ClusterNetwork
	if err := f.wait(ctx, "the ClusterNetwork "+networkv1.ClusterNetworkDefault, func(ctx context.Context) (err error) {
		cn, err = netc.ClusterNetworks().Get(ctx, networkv1.ClusterNetworkDefault)
		return err
	}); err != nil {
		return b, err
	}
	if b.Cluster, err = ParseClusterNetwork(cn); err != nil {
		return b, err
	}
	f.mode = b.Cluster.Mode
	var hs *networkv1.HostSubnet
	if err := f.wait(ctx, "this node's HostSubnet "+cfg.Node, func(ctx context.Context) (err error) {
		hs, err = netc.HostSubnets().Get(ctx, cfg.Node)
		return err
	}); err != nil {
		return b, err
	}
	if b.NodeIP, b.Subnet, err = parseHostSubnet(hs); err != nil {
		return b, err
	}
	f.subnet = b.Subnet
	var nns *networkv1.NetNamespaceList
	if err := f.wait(ctx, "the NetNamespaces", func(ctx context.Context) (err error) {
		nns, err = netc.NetNamespaces().List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		return b, err
	}
	b.Projects = map[string]uint32{}
	for _, n := range nns.Items {
		b.Projects[n.NetName] = n.NetID
	}
	return b, nil
}

// wait retries get until it succeeds or ctx ends; a missing object or an
// unreachable API server is waited for, a refusal (403) is not.
func (f *Follower) wait(ctx context.Context, what string, get func(context.Context) error) error {
	logged := false
	for {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := get(gctx)
		cancel()
		if err == nil {
			return nil
		}
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return fmt.Errorf("kubesource: reading %s: %w", what, err)
		}
		if !logged {
			f.log.Info("waiting for "+what, "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubesource: waiting for %s: %w", what, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Follow mirrors HostSubnets, NetNamespaces, Services, Namespaces' labels
// and Pods (this node's; in networkpolicy mode every node's, the peers
// policies name), EgressNetworkPolicies (except in subnet mode) and, in
// networkpolicy mode, NetworkPolicies into sink through a source.Mirror
// until ctx ends or Close.
func (f *Follower) Follow(ctx context.Context, sink source.Sink) {
	f.ctx, f.stop = context.WithCancel(ctx)
	ctx = f.ctx
	f.m = source.NewMirror(sink, source.MirrorConfig{Node: f.cfg.Node, Subnet: f.subnet, Logger: f.log})
	hsi := f.net.HostSubnets().Informer()
	nni := f.net.NetNamespaces().Informer()
	f.remotes = nil
	if r, err := hsi.AddEventHandler(events(f.hostSubnet)); err == nil {
		f.remotes = append(f.remotes, r.HasSynced)
	}
	if r, err := nni.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    f.netNamespace,
		UpdateFunc: func(_, o any) { f.netNamespace(o) },
		DeleteFunc: f.netNamespaceDeleted,
	}); err == nil {
		f.remotes = append(f.remotes, r.HasSynced)
	}
	go hsi.RunWithContext(ctx)
	go nni.RunWithContext(ctx)
	// Services' first list is consistent too (WaitForRemotes).
	fac := informers.NewSharedInformerFactoryWithOptions(f.kc, 0, informers.WithTweakListOptions(networkv1.ConsistentList))
	si := fac.Core().V1().Services().Informer()
	if r, err := si.AddEventHandler(events(f.service)); err == nil {
		f.remotes = append(f.remotes, r.HasSynced)
	}
	ni := fac.Core().V1().Namespaces().Informer()
	_, _ = ni.AddEventHandler(events(f.namespace))
	// The node's own pods (RBAC cannot narrow the node's account to
	// them; the field selector narrows what it asks), or all of them
	// when policies may name any as a peer.
	pods := informers.NewSharedInformerFactoryWithOptions(f.kc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		if f.mode != sdn.ModeNetworkPolicy {
			o.FieldSelector = "spec.nodeName=" + f.cfg.Node
		}
	}))
	pi := pods.Core().V1().Pods().Informer()
	f.pods = pi
	f.synced = append(f.synced, ni.HasSynced, pi.HasSynced)
	_, _ = pi.AddEventHandler(events(f.pod))
	pods.Start(ctx.Done())
	if f.mode != sdn.ModeSubnet {
		ei := f.net.EgressNetworkPolicies("").Informer()
		_, _ = ei.AddEventHandler(events(f.egressFirewall))
		go ei.RunWithContext(ctx)
	}
	if f.mode == sdn.ModeNetworkPolicy {
		pi := fac.Networking().V1().NetworkPolicies().Informer()
		f.synced = append(f.synced, pi.HasSynced)
		_, _ = pi.AddEventHandler(events(f.policy))
	}
	fac.Start(ctx.Done())
}

// WaitForSync waits until the informers Follow started have delivered
// their first full list (every pod, namespace and policy there was), or
// ctx ends; it reports which. In networkpolicy mode a node waits for it
// before it adopts or attaches pods, so that no pod runs without the
// policies that select it.
func (f *Follower) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), f.synced...)
}

// WaitForRemotes waits until the HostSubnets, NetNamespaces and Services
// there were when Follow started have reached the sink (their handlers
// ran, not just the informers' caches: the other nodes' tunnel rules, the
// projects' VNIDs and the services' rules are in), or ctx ends; it reports
// which. A daemon taking over from a running one waits for it before the
// running one parks (internal/daemon, handoff.go): the successor would
// otherwise forward for tens of milliseconds without the other nodes. It
// looks every 5 ms (cache.WaitForCacheSync's 100 ms would hold the
// upgrade back that long for nothing).
func (f *Follower) WaitForRemotes(ctx context.Context) bool {
	for {
		synced := true
		for _, s := range f.remotes {
			synced = synced && s()
		}
		if synced {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond): // polling: the registrations have no channel to wait on
		}
	}
}

// Close stops following.
func (f *Follower) Close() {
	if f.stop != nil {
		f.stop()
	}
}

// events returns informer handlers that call fn with each object and
// whether it was deleted.
func events(fn func(o any, deleted bool)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { fn(o, false) },
		UpdateFunc: func(_, o any) { fn(o, false) },
		DeleteFunc: func(o any) { fn(o, true) },
	}
}

// unwrap returns the object of an informer's delete notification.
func unwrap(o any) any {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return o
}

// hostSubnet mirrors a HostSubnet: another node's is a remote node, this
// node's a subnet (a new one: the node moves).
func (f *Follower) hostSubnet(o any, deleted bool) {
	hs, ok := unwrap(o).(*networkv1.HostSubnet)
	if !ok {
		return
	}
	if deleted {
		f.m.SetNodeEgressIPs(hs.Name, nil)
	} else {
		ips, err := source.ParseEgressIPs(hs.EgressIPs)
		if err != nil {
			f.log.Error("HostSubnet "+hs.Name, "err", err)
		}
		f.m.SetNodeEgressIPs(hs.Name, ips)
	}
	switch {
	case hs.Name == f.cfg.Node && deleted:
		// gvs-master releases it with the Node; keep forwarding on it
		// until a new one is given (as past an etcd lease).
		f.log.Warn("this node's HostSubnet was deleted", "subnet", f.m.Subnet())
	case deleted:
		f.m.RemoveRemote(hs.Name)
	case hs.Name == f.cfg.Node:
		if _, sub, err := parseHostSubnet(hs); err != nil {
			f.log.Error("HostSubnet", "err", err)
		} else {
			f.m.MoveSubnet(f.ctx, sub)
		}
	case networkv1.WantsSubnet(hs):
		// A host that is not a node, waiting for gvs-master's subnet.
	default:
		rn, err := remoteOf(hs)
		if err != nil {
			f.log.Error("HostSubnet refused", "err", err)
			if errors.Is(err, networkv1.ErrInvalidFixedVNID) {
				// Its old rules, if any, must not stay: fail closed.
				f.m.RemoveRemote(hs.Name)
			}
			return
		}
		f.m.SetRemote(rn)
	}
}

// netNamespace mirrors a NetNamespace's VNID and its multicast opt-in
// (networkv1.MulticastEnabledAnnotation).
func (f *Follower) netNamespace(o any) {
	if nn, ok := unwrap(o).(*networkv1.NetNamespace); ok {
		f.m.SetProjectVNID(nn.NetName, nn.NetID)
		f.m.SetProjectMulticast(nn.NetName, nn.Annotations[networkv1.MulticastEnabledAnnotation] == "true")
		ips, err := source.ParseEgressIPs(nn.EgressIPs)
		if err != nil {
			f.log.Error("NetNamespace "+nn.Name, "err", err)
		}
		f.m.SetProjectEgressIPs(nn.NetName, ips)
	}
}

// netNamespaceDeleted opts a deleted NetNamespace's project out of
// multicast and forgets its egress IPs; its VNID stays (its pods go with
// its Namespace).
func (f *Follower) netNamespaceDeleted(o any) {
	if nn, ok := unwrap(o).(*networkv1.NetNamespace); ok {
		f.m.SetProjectMulticast(nn.NetName, false)
		f.m.SetProjectEgressIPs(nn.NetName, nil)
	}
}

// namespace mirrors a Namespace's labels.
func (f *Follower) namespace(o any, deleted bool) {
	ns, ok := unwrap(o).(*corev1.Namespace)
	if !ok {
		return
	}
	labels := ns.Labels
	if deleted {
		labels = nil
	} else if labels == nil {
		labels = map[string]string{}
	}
	f.m.SetNamespaceLabels(ns.Name, labels)
}

// pod mirrors a pod's labels, named container ports and address, which
// its node claims (none for a pod on the host network or without one yet:
// it is no pod-network endpoint). A node's credentials may set the status
// of its own pods, so the Mirror believes the address only inside that
// node's subnet.
func (f *Follower) pod(o any, deleted bool) {
	p, ok := unwrap(o).(*corev1.Pod)
	if !ok {
		return
	}
	if deleted {
		f.m.DeletePod(p.Namespace, p.Name)
		return
	}
	sp := source.Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels}
	if a, err := netip.ParseAddr(p.Status.PodIP); err == nil && !p.Spec.HostNetwork {
		sp.IP = a
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name != "" && cp.ContainerPort > 0 && cp.ContainerPort <= 65535 {
				sp.Ports = append(sp.Ports, netpol.NamedPort{Name: cp.Name, Protocol: cp.Protocol, Port: uint16(cp.ContainerPort)})
			}
		}
	}
	f.m.SetPod(sp, p.Spec.NodeName)
}

// egressFirewall mirrors an EgressNetworkPolicy.
func (f *Follower) egressFirewall(o any, deleted bool) {
	np, ok := unwrap(o).(*networkv1.EgressNetworkPolicy)
	switch {
	case !ok:
	case deleted:
		f.m.DeleteEgressFirewall(np.Namespace, np.Name)
	default:
		f.m.SetEgressFirewall(np)
	}
}

// policy mirrors a NetworkPolicy.
func (f *Follower) policy(o any, deleted bool) {
	np, ok := unwrap(o).(*networkingv1.NetworkPolicy)
	switch {
	case !ok:
	case deleted:
		f.m.DeletePolicy(np.Namespace, np.Name)
	default:
		f.m.SetPolicy(np)
	}
}

// service mirrors a Service with a ClusterIP (headless and ExternalName
// ones have none to guard).
func (f *Follower) service(o any, deleted bool) {
	s, ok := unwrap(o).(*corev1.Service)
	if !ok {
		return
	}
	ip, err := netip.ParseAddr(s.Spec.ClusterIP)
	if deleted || err != nil || !ip.Is4() {
		f.m.DeleteService(s.Namespace, s.Name)
		return
	}
	svc := sdn.Service{Namespace: s.Namespace, Name: s.Name, ClusterIP: ip}
	for _, p := range s.Spec.Ports {
		var proto uint8
		switch strings.ToUpper(string(p.Protocol)) {
		case "TCP", "":
			proto = sdn.ProtoTCP
		case "UDP":
			proto = sdn.ProtoUDP
		case "SCTP":
			proto = sdn.ProtoSCTP
		default:
			continue
		}
		svc.Ports = append(svc.Ports, sdn.ServicePort{Protocol: proto, Port: uint16(p.Port)})
	}
	f.m.SetService(svc)
}
