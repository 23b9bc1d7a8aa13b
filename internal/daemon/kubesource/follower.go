// Package kubesource is gvs-switchd's Kubernetes source: the node follows
// a real API server instead of gvs's etcd registry, reading OpenShift
// SDN's objects that gvs-master keeps there (network.openshift.io/v1:
// the ClusterNetwork "default", HostSubnets, NetNamespaces) and the
// Services, and drives the node through the same internal/daemon/source
// interfaces as the etcd follower does. It only reads (the gvs-node
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
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
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

// Cluster is the ClusterNetwork "default" as the node takes it.
type Cluster struct {
	ClusterNetworks []netip.Prefix
	ServiceNetwork  netip.Prefix
	Mode            sdn.Mode
	VXLANPort       uint16
}

// Bootstrap is what the API server told the node at start.
type Bootstrap struct {
	Cluster Cluster
	// Subnet and NodeIP are the node's HostSubnet's.
	Subnet netip.Prefix
	NodeIP netip.Addr
	// Projects are the NetNamespaces' VNIDs.
	Projects map[string]uint32
}

// Follower follows the API server for one node.
type Follower struct {
	cfg  Config
	log  *slog.Logger
	net  *networkv1.Client
	kc   kubernetes.Interface
	stop context.CancelFunc

	mode   sdn.Mode               // the ClusterNetwork's at start
	synced []cache.InformerSynced // the informers Follow started

	mu      sync.Mutex // one Sink call at a time; guards the fields below
	subnet  netip.Prefix
	remotes map[string]remote // by remote node name
	// pods holds the pods with a pod-network address, by node name and
	// then namespace/name, so that a change of a node's subnet checks
	// their addresses again (podAddress).
	pods map[string]map[string]*corev1.Pod
}

// remote is another node as its HostSubnet gives it.
type remote struct {
	ip     netip.Addr // underlay address
	subnet netip.Prefix
}

// ParseClusterNetwork reads a ClusterNetwork.
func ParseClusterNetwork(cn *networkv1.ClusterNetwork) (Cluster, error) {
	var c Cluster
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

// Start connects to the API server, waits for gvs-master's ClusterNetwork
// and this node's HostSubnet (gvs-master makes it when the Node appears),
// and reads the NetNamespaces. The node then calls Follow.
func Start(ctx context.Context, cfg Config) (*Follower, Bootstrap, error) {
	var b Bootstrap
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.REST == nil || cfg.Node == "" {
		return nil, b, errors.New("kubesource: Config.REST and Config.Node are required")
	}
	netc, err := networkv1.NewForConfig(cfg.REST)
	if err != nil {
		return nil, b, err
	}
	kc, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return nil, b, err
	}
	f := &Follower{cfg: cfg, log: log, net: netc, kc: kc, remotes: map[string]remote{},
		pods: map[string]map[string]*corev1.Pod{}}
	var cn *networkv1.ClusterNetwork
	if err := f.wait(ctx, "the ClusterNetwork "+networkv1.ClusterNetworkDefault, func(ctx context.Context) (err error) {
		cn, err = netc.ClusterNetworks().Get(ctx, networkv1.ClusterNetworkDefault)
		return err
	}); err != nil {
		return nil, b, err
	}
	if b.Cluster, err = ParseClusterNetwork(cn); err != nil {
		return nil, b, err
	}
	f.mode = b.Cluster.Mode
	var hs *networkv1.HostSubnet
	if err := f.wait(ctx, "this node's HostSubnet "+cfg.Node, func(ctx context.Context) (err error) {
		hs, err = netc.HostSubnets().Get(ctx, cfg.Node)
		return err
	}); err != nil {
		return nil, b, err
	}
	if b.NodeIP, b.Subnet, err = parseHostSubnet(hs); err != nil {
		return nil, b, err
	}
	f.subnet = b.Subnet
	var nns *networkv1.NetNamespaceList
	if err := f.wait(ctx, "the NetNamespaces", func(ctx context.Context) (err error) {
		nns, err = netc.NetNamespaces().List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		return nil, b, err
	}
	b.Projects = map[string]uint32{}
	for _, n := range nns.Items {
		b.Projects[n.NetName] = n.NetID
	}
	return f, b, nil
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

// Follow mirrors HostSubnets, NetNamespaces and, if sink takes them
// (source.ServiceSink), Services, and, if it is a source.LabelSink,
// Namespaces' labels and Pods (this node's; in networkpolicy mode every
// node's, the peers policies name), and in networkpolicy mode, if it is a
// source.PolicySink, NetworkPolicies, into sink until ctx ends or Close.
func (f *Follower) Follow(ctx context.Context, sink source.Sink) {
	ctx, f.stop = context.WithCancel(ctx)
	hsi := f.net.HostSubnets().Informer()
	nni := f.net.NetNamespaces().Informer()
	_, _ = hsi.AddEventHandler(events(func(o any, deleted bool) { f.hostSubnet(sink, o, deleted) }))
	_, _ = nni.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { f.netNamespace(sink, o) },
		UpdateFunc: func(_, o any) { f.netNamespace(sink, o) },
	})
	go hsi.RunWithContext(ctx)
	go nni.RunWithContext(ctx)
	fac := informers.NewSharedInformerFactory(f.kc, 0)
	if ss, ok := sink.(source.ServiceSink); ok {
		si := fac.Core().V1().Services().Informer()
		_, _ = si.AddEventHandler(events(func(o any, deleted bool) { f.service(ss, o, deleted) }))
	}
	if ls, ok := sink.(source.LabelSink); ok {
		ni := fac.Core().V1().Namespaces().Informer()
		set := func(o any, deleted bool) {
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
			f.mu.Lock()
			defer f.mu.Unlock()
			if err := ls.SetNamespaceLabels(ns.Name, labels); err != nil {
				f.log.Error("namespace labels", "namespace", ns.Name, "err", err)
			}
		}
		_, _ = ni.AddEventHandler(events(func(o any, deleted bool) { set(o, deleted) }))
		// The node's own pods (RBAC cannot narrow the node's account to
		// them; the field selector narrows what it asks), or all of them
		// when policies may name any as a peer.
		pods := informers.NewSharedInformerFactoryWithOptions(f.kc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			if f.mode != sdn.ModeNetworkPolicy {
				o.FieldSelector = "spec.nodeName=" + f.cfg.Node
			}
		}))
		pi := pods.Core().V1().Pods().Informer()
		f.synced = append(f.synced, ni.HasSynced, pi.HasSynced)
		_, _ = pi.AddEventHandler(events(func(o any, deleted bool) { f.pod(ls, o, deleted) }))
		pods.Start(ctx.Done())
	}
	if es, ok := sink.(source.EgressFirewallSink); ok && f.mode != sdn.ModeSubnet {
		ei := f.net.EgressNetworkPolicies("").Informer()
		_, _ = ei.AddEventHandler(events(func(o any, deleted bool) { f.egressFirewall(es, o, deleted) }))
		go ei.RunWithContext(ctx)
	}
	if ps, ok := sink.(source.PolicySink); ok && f.mode == sdn.ModeNetworkPolicy {
		pi := fac.Networking().V1().NetworkPolicies().Informer()
		f.synced = append(f.synced, pi.HasSynced)
		_, _ = pi.AddEventHandler(events(func(o any, deleted bool) { f.policy(ps, o, deleted) }))
	}
	fac.Start(ctx.Done())
}

// egressFirewall mirrors an EgressNetworkPolicy. One with a rule that
// cannot be read (neither or both of cidrSelector and dnsName, a bad CIDR,
// an unknown type) fails closed: the project's egress is denied entirely
// until it is fixed.
func (f *Follower) egressFirewall(es source.EgressFirewallSink, o any, deleted bool) {
	np, ok := unwrap(o).(*networkv1.EgressNetworkPolicy)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if deleted {
		if err := es.DeleteEgressFirewall(np.Namespace, np.Name); err != nil {
			f.log.Error("egress firewall", "policy", np.Namespace+"/"+np.Name, "err", err)
		}
		return
	}
	rules, err := source.EgressRulesOf(np)
	if err != nil {
		f.log.Error("egress firewall refused: the project's egress is denied until it is fixed", "policy", np.Namespace+"/"+np.Name, "err", err)
		rules = source.DenyAllEgress()
	}
	if err := es.SetEgressFirewall(np.Namespace, np.Name, rules); err != nil {
		f.log.Error("egress firewall", "policy", np.Namespace+"/"+np.Name, "err", err)
	}
}

// policy mirrors a NetworkPolicy. One the compiler refuses is logged and
// leaves the previous version of it in force.
func (f *Follower) policy(ps source.PolicySink, o any, deleted bool) {
	np, ok := unwrap(o).(*networkingv1.NetworkPolicy)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var err error
	if deleted {
		err = ps.DeletePolicy(np.Namespace, np.Name)
	} else {
		err = ps.SetPolicy(np)
	}
	if err != nil {
		f.log.Error("network policy", "policy", np.Namespace+"/"+np.Name, "err", err)
	}
}

// pod mirrors a pod's labels, address (invalid for a pod on the host
// network or without one yet: it is no pod-network endpoint) and named
// container ports.
func (f *Follower) pod(ls source.LabelSink, o any, deleted bool) {
	p, ok := unwrap(o).(*corev1.Pod)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	if byKey := f.pods[p.Spec.NodeName]; byKey != nil {
		delete(byKey, key)
		if len(byKey) == 0 {
			delete(f.pods, p.Spec.NodeName)
		}
	}
	if deleted {
		if err := ls.DeletePod(p.Namespace, p.Name); err != nil {
			f.log.Error("pod", "pod", key, "err", err)
		}
		return
	}
	if _, err := netip.ParseAddr(p.Status.PodIP); err == nil && !p.Spec.HostNetwork && p.Spec.NodeName != "" {
		if f.pods[p.Spec.NodeName] == nil {
			f.pods[p.Spec.NodeName] = map[string]*corev1.Pod{}
		}
		f.pods[p.Spec.NodeName][key] = p
	}
	f.setPod(ls, p)
}

// setPod hands pod p to ls; f.mu is held.
func (f *Follower) setPod(ls source.LabelSink, p *corev1.Pod) {
	sp := source.Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, IP: f.podAddress(p)}
	if sp.Labels == nil {
		sp.Labels = map[string]string{}
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name != "" && cp.ContainerPort > 0 && cp.ContainerPort <= 65535 {
				sp.Ports = append(sp.Ports, netpol.NamedPort{Name: cp.Name, Protocol: cp.Protocol, Port: uint16(cp.ContainerPort)})
			}
		}
	}
	if err := ls.SetPod(sp); err != nil {
		f.log.Error("pod", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

// podAddress returns pod p's pod-network address, or the invalid address
// for a pod on the host network, without an address yet, or whose address
// is not inside its node's subnet (as the node's HostSubnet gives it) —
// which policies must not believe: a node's credentials may set the status
// of its own pods, and with an address of another node's pod a compromised
// node could lend that pod the labels its policies admit. A pod of a node
// whose HostSubnet is not known yet gets its address when it is
// (recheckPods); f.mu is held.
func (f *Follower) podAddress(p *corev1.Pod) netip.Addr {
	a, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil || p.Spec.HostNetwork {
		return netip.Addr{}
	}
	var sub netip.Prefix
	if p.Spec.NodeName == f.cfg.Node {
		sub = f.subnet
	} else if r, ok := f.remotes[p.Spec.NodeName]; ok {
		sub = r.subnet
	}
	switch {
	case !sub.IsValid():
		f.log.Debug("pod address withheld until its node's HostSubnet is known", "pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName, "ip", a)
		return netip.Addr{}
	case !sub.Contains(a):
		f.log.Warn("pod address outside its node's subnet ignored", "pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName, "ip", a, "subnet", sub)
		return netip.Addr{}
	}
	return a
}

// recheckPods hands node's pods to sink again after its subnet changed;
// f.mu is held.
func (f *Follower) recheckPods(sink source.Sink, node string) {
	ls, ok := sink.(source.LabelSink)
	if !ok {
		return
	}
	for _, key := range slices.Sorted(maps.Keys(f.pods[node])) {
		f.setPod(ls, f.pods[node][key])
	}
}

// WaitForSync waits until the informers Follow started have delivered
// their first full list (every pod, namespace and policy there was), or
// ctx ends; it reports which. In networkpolicy mode a node waits for it
// before it adopts or attaches pods, so that no pod runs without the
// policies that select it.
func (f *Follower) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), f.synced...)
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
func (f *Follower) hostSubnet(sink source.Sink, o any, deleted bool) {
	hs, ok := unwrap(o).(*networkv1.HostSubnet)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if hs.Name == f.cfg.Node {
		if deleted {
			// gvs-master releases it with the Node; keep forwarding on
			// it until a new one is given (as past an etcd lease).
			f.log.Warn("this node's HostSubnet was deleted", "subnet", f.subnet)
			return
		}
		_, sub, err := parseHostSubnet(hs)
		if err != nil {
			f.log.Error("this node's HostSubnet", "err", err)
			return
		}
		if sub != f.subnet {
			f.log.Info("this node's subnet changed", "from", f.subnet, "to", sub)
			if err := sink.ChangeSubnet(sub); err != nil {
				f.log.Error("change subnet", "err", err)
				return
			}
			f.subnet = sub
			f.recheckPods(sink, hs.Name)
		}
		return
	}
	old, had := f.remotes[hs.Name]
	if deleted {
		if had {
			delete(f.remotes, hs.Name)
			if err := sink.RemoveRemote(old.ip); err != nil {
				f.log.Error("remove remote node", "node", hs.Name, "err", err)
			}
			f.log.Info("remote node removed", "node", hs.Name, "ip", old.ip)
			f.recheckPods(sink, hs.Name)
		}
		return
	}
	ip, sub, err := parseHostSubnet(hs)
	if err != nil {
		f.log.Error("remote node", "err", err)
		return
	}
	if had && old.ip != ip {
		_ = sink.RemoveRemote(old.ip)
		delete(f.remotes, hs.Name)
	}
	if err := sink.AddRemote(sdn.RemoteNode{Name: hs.Name, IP: ip, Subnet: sub}); err != nil {
		f.log.Error("add remote node", "node", hs.Name, "err", err)
		if had && old.ip != ip {
			f.recheckPods(sink, hs.Name)
		}
		return
	}
	f.remotes[hs.Name] = remote{ip: ip, subnet: sub}
	if !had {
		f.log.Info("remote node added", "node", hs.Name, "ip", ip, "subnet", sub)
	}
	if !had || old.subnet != sub {
		f.recheckPods(sink, hs.Name)
	}
}

// netNamespace mirrors a NetNamespace's VNID. A deleted one changes
// nothing: its pods go with its Namespace.
func (f *Follower) netNamespace(sink source.Sink, o any) {
	nn, ok := unwrap(o).(*networkv1.NetNamespace)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := sink.SetProjectVNID(nn.NetName, nn.NetID); err != nil {
		f.log.Error("project VNID", "project", nn.NetName, "err", err)
	}
}

// service mirrors a Service with a ClusterIP (headless and ExternalName
// ones have none to guard). A Service the node refuses has its old rules
// removed: in multitenant mode it is then unreachable, not open.
func (f *Follower) service(ss source.ServiceSink, o any, deleted bool) {
	s, ok := unwrap(o).(*corev1.Service)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ip, err := netip.ParseAddr(s.Spec.ClusterIP)
	if deleted || err != nil || !ip.Is4() {
		if err := ss.DeleteService(s.Namespace, s.Name); err != nil {
			f.log.Error("remove service", "service", s.Namespace+"/"+s.Name, "err", err)
		}
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
	if err := ss.SetService(svc); err != nil {
		f.log.Error("service refused", "service", s.Namespace+"/"+s.Name, "err", err)
		_ = ss.DeleteService(s.Namespace, s.Name)
	}
}
