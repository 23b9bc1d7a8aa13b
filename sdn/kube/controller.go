package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/master"
)

// Annotations gvs-master keeps on the ClusterNetwork "default": the scan
// cursors of its allocators, so that a restarted master or a new leader
// goes on where the last one stopped (a released subnet or VNID is not
// handed out again at once), as the etcd mode's /gvs/subnet-cursor and
// /gvs/vnid-cursor do.
const (
	SubnetCursorsAnnotation = "network.gvs.io/subnet-cursors" // JSON list: next index per cluster network
	VNIDCursorAnnotation    = "network.gvs.io/vnid-cursor"    // decimal: where the next VNID scan starts
)

// Retry bounds of a failed sync: exponential per object, capped so that
// after an API outage every object is retried within this time.
const (
	retryBase = 100 * time.Millisecond
	retryMax  = 10 * time.Second
)

// keyKind says what a queue key names.
type keyKind uint8

const (
	projectKey keyKind = iota // a Namespace and its NetNamespace
	nodeKey                   // a Node and its HostSubnet
	egressKey                 // the automatic egress IP assignment (name ""; egressip.go)
)

type key struct {
	kind keyKind
	name string
}

// controller is one leadership term of a Master. Everything below the
// informers runs on the single worker goroutine (run), so the allocators
// need no lock.
type controller struct {
	m   *Master
	log *slog.Logger
	net Network

	nsInf, nodeInf, netnsInf, hsInf cache.SharedIndexInformer
	queue                           workqueue.TypedRateLimitingInterface[key]

	vnids   *master.VNIDs // nil in subnet mode
	subnets *master.SubnetAllocator
	held    map[string]netip.Prefix // HostSubnet name → the subnet it holds in subnets

	// saved is the cursor annotations last read from or written to the
	// ClusterNetwork.
	saved map[string]string

	egress egressState
}

func newController(m *Master) *controller {
	c := &controller{m: m, log: m.log, net: m.cfg.Network, held: map[string]netip.Prefix{}}
	core := m.kube.CoreV1().RESTClient()
	c.nsInf = cache.NewSharedIndexInformer(cache.NewListWatchFromClient(core, "namespaces", "", fields.Everything()), &corev1.Namespace{}, 0, cache.Indexers{})
	c.nodeInf = cache.NewSharedIndexInformer(cache.NewListWatchFromClient(core, "nodes", "", fields.Everything()), &corev1.Node{}, 0, cache.Indexers{})
	c.netnsInf = m.net.NetNamespaces().Informer()
	c.hsInf = m.net.HostSubnets().Informer()
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[key](retryBase, retryMax),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "gvs-master"})
	return c
}

// run publishes the ClusterNetwork, starts the informers, rebuilds the
// allocators once they have synced, then works the queue until ctx is done.
func (c *controller) run(ctx context.Context) {
	defer c.queue.ShutDown()
	if !c.retry(ctx, "publish the ClusterNetwork", c.publish) {
		return
	}
	c.handle(c.nsInf, projectKey, nil)
	c.handle(c.netnsInf, projectKey, nil)
	c.handle(c.nodeInf, nodeKey, nodeChanged)
	c.handle(c.hsInf, nodeKey, nil)
	c.handleEgress(c.netnsInf)
	c.handleEgress(c.hsInf)
	for _, inf := range []cache.SharedIndexInformer{c.nsInf, c.nodeInf, c.netnsInf, c.hsInf} {
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.nsInf.HasSynced, c.nodeInf.HasSynced, c.netnsInf.HasSynced, c.hsInf.HasSynced) {
		return
	}
	if err := c.rebuild(); err != nil {
		c.log.Error("master: cannot rebuild the allocators", "err", err)
		return
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	if iv := c.m.cfg.EgressCheckInterval; iv > 0 {
		go c.checkEgressNodes(ctx, iv)
	} else {
		c.egress.probed = true // no check: every egress node counts as reachable
		c.queue.Add(key{egressKey, ""})
	}
	for c.next(ctx) {
	}
}

// retry runs fn until it succeeds or ctx is done (false).
func (c *controller) retry(ctx context.Context, what string, fn func(context.Context) error) bool {
	for d := retryBase; ; d = min(2*d, retryMax) {
		err := fn(ctx)
		if err == nil {
			return true
		}
		c.log.Warn("master: cannot "+what+"; retrying", "err", err, "in", d)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
		}
	}
}

// handle queues the key of every object inf reports; changed, if not nil,
// filters updates.
func (c *controller) handle(inf cache.SharedIndexInformer, kind keyKind, changed func(old, new any) bool) {
	add := func(obj any) {
		if name, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key{kind, name})
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: add,
		UpdateFunc: func(old, new any) {
			if changed == nil || changed(old, new) {
				add(new)
			}
		},
		DeleteFunc: add,
	})
}

// nodeChanged ignores the Node updates that matter nothing here (the
// kubelet's status heartbeats).
func nodeChanged(old, new any) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := new.(*corev1.Node)
	return !ok1 || !ok2 || o.UID != n.UID || InternalIP(o) != InternalIP(n)
}

func (c *controller) next(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	var err error
	switch k.kind {
	case projectKey:
		err = c.syncProject(ctx, k.name)
	case nodeKey:
		err = c.syncNode(ctx, k.name)
	case egressKey:
		err = c.syncEgress(ctx)
	}
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("master: sync failed; will retry", "name", k.name, "err", err)
			c.queue.AddRateLimited(k)
		}
		return true
	}
	c.queue.Forget(k)
	if err := c.saveCursors(ctx); err != nil {
		c.log.Warn("master: saving the allocation cursors", "err", err)
	}
	return true
}

// clusterNetwork returns the ClusterNetwork the configuration describes.
func (c *controller) clusterNetwork() *networkv1.ClusterNetwork {
	cn := &networkv1.ClusterNetwork{
		ObjectMeta:     metav1.ObjectMeta{Name: networkv1.ClusterNetworkDefault},
		Network:        c.net.ClusterNetworks[0].CIDR.String(),
		ServiceNetwork: c.net.ServiceNetwork.String(),
		PluginName:     string(c.net.Mode.Canonical()),
	}
	cn.HostSubnetLength = uint32(c.net.ClusterNetworks[0].HostSubnetLength)
	for _, n := range c.net.ClusterNetworks {
		cn.ClusterNetworks = append(cn.ClusterNetworks, networkv1.ClusterNetworkEntry{CIDR: n.CIDR.String(), HostSubnetLength: uint32(n.HostSubnetLength)})
	}
	port := uint32(cmp.Or(c.net.VXLANPort, sdn.VXLANPort))
	cn.VXLANPort = &port
	if c.net.MTU != 0 {
		mtu := c.net.MTU
		cn.MTU = &mtu
	}
	return cn
}

// publish creates or updates the ClusterNetwork "default" from the
// configuration, keeping its metadata (and the cursors in it).
func (c *controller) publish(ctx context.Context) error {
	cns := c.m.net.ClusterNetworks()
	want := c.clusterNetwork()
	cur, err := cns.Get(ctx, want.Name)
	if apierrors.IsNotFound(err) {
		if _, err := cns.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		c.log.Info("published the ClusterNetwork", "network", want.Network, "plugin", want.PluginName)
		c.saved = nil
		return nil
	}
	if err != nil {
		return err
	}
	upd := cur.DeepCopy()
	upd.Network, upd.HostSubnetLength, upd.ServiceNetwork = want.Network, want.HostSubnetLength, want.ServiceNetwork
	upd.PluginName, upd.ClusterNetworks, upd.VXLANPort, upd.MTU = want.PluginName, want.ClusterNetworks, want.VXLANPort, want.MTU
	if !reflect.DeepEqual(upd, cur) {
		if _, err := cns.Update(ctx, upd); err != nil {
			return err
		}
		c.log.Info("updated the ClusterNetwork to the configuration", "network", want.Network, "plugin", want.PluginName)
	}
	c.saved = map[string]string{
		SubnetCursorsAnnotation: cur.Annotations[SubnetCursorsAnnotation],
		VNIDCursorAnnotation:    cur.Annotations[VNIDCursorAnnotation],
	}
	return nil
}

// cursors returns the allocators' cursors as the annotation values.
func (c *controller) cursors() map[string]string {
	b, _ := json.Marshal(c.subnets.Cursors())
	m := map[string]string{SubnetCursorsAnnotation: string(b), VNIDCursorAnnotation: ""}
	if c.vnids != nil {
		m[VNIDCursorAnnotation] = strconv.FormatUint(uint64(c.vnids.Cursor()), 10)
	}
	return m
}

// saveCursors writes the cursors to the ClusterNetwork when they moved.
func (c *controller) saveCursors(ctx context.Context) error {
	want := c.cursors()
	if sameValues(want, c.saved) {
		return nil
	}
	cns := c.m.net.ClusterNetworks()
	cur, err := cns.Get(ctx, networkv1.ClusterNetworkDefault)
	if err != nil {
		return err
	}
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	for k, v := range want {
		if v == "" {
			delete(cur.Annotations, k)
		} else {
			cur.Annotations[k] = v
		}
	}
	if _, err := cns.Update(ctx, cur); err != nil {
		return err
	}
	c.saved = want
	return nil
}

// sameValues reports whether b has every key of a with the same value.
func sameValues(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// rebuild fills the allocators from the NetNamespaces and HostSubnets the
// informers hold, and restores the saved cursors.
func (c *controller) rebuild() error {
	if c.net.usesVNIDs() {
		c.vnids = master.NewVNIDs(c.net.GlobalProjects)
		var top uint32
		for _, obj := range c.netnsInf.GetStore().List() {
			n := obj.(*networkv1.NetNamespace)
			c.vnids.Load(n.Name, n.NetID)
			top = max(top, n.NetID)
		}
		if v, err := strconv.ParseUint(c.saved[VNIDCursorAnnotation], 10, 32); err == nil {
			c.vnids.SetCursor(uint32(v))
		} else if top >= master.MinVNID && top < master.MaxVNID {
			c.vnids.SetCursor(top + 1) // no saved cursor: after the highest in use
		}
		c.log.Info("rebuilt the VNIDs from the NetNamespaces", "netnamespaces", len(c.vnids.Projects()), "cursor", c.vnids.Cursor())
	}
	sa, err := master.NewSubnetAllocator(c.net.ClusterNetworks)
	if err != nil {
		return err
	}
	c.subnets = sa
	var cur []uint32
	if json.Unmarshal([]byte(c.saved[SubnetCursorsAnnotation]), &cur) == nil {
		sa.SetCursors(cur)
	}
	hss := c.hsInf.GetStore().List()
	slices.SortFunc(hss, func(a, b any) int {
		x, y := a.(*networkv1.HostSubnet), b.(*networkv1.HostSubnet)
		return cmp.Or(x.CreationTimestamp.Compare(y.CreationTimestamp.Time), cmp.Compare(x.Name, y.Name))
	})
	for _, obj := range hss {
		hs := obj.(*networkv1.HostSubnet)
		if networkv1.WantsSubnet(hs) {
			continue // no subnet yet: syncNode assigns one
		}
		if err := c.hold(hs); err != nil {
			// Left unheld: syncNode replaces it if it is a node's.
			c.log.Error("master: HostSubnet not usable", "hostsubnet", hs.Name, "subnet", hs.Subnet, "err", err)
		}
	}
	c.log.Info("rebuilt the subnets from the HostSubnets", "hostsubnets", len(c.held), "cursors", sa.Cursors())
	return nil
}

// errSubnetTaken: a HostSubnet's subnet is another's already.
var errSubnetTaken = errors.New("subnet already held by another HostSubnet")

// hold records hs's subnet as held by hs. A subnet outside today's cluster
// networks is kept, as the etcd mode keeps it; a subnet another HostSubnet
// holds is refused.
func (c *controller) hold(hs *networkv1.HostSubnet) error {
	p, err := netip.ParsePrefix(hs.Subnet)
	if err != nil {
		return err
	}
	fresh, err := c.subnets.MarkUsed(p)
	switch {
	case errors.Is(err, master.ErrNotInNetwork):
		c.log.Warn("master: HostSubnet outside the cluster networks; kept", "hostsubnet", hs.Name, "subnet", p)
	case err != nil:
		return err
	case !fresh:
		return fmt.Errorf("%v: %w", p, errSubnetTaken)
	}
	c.held[hs.Name] = p
	return nil
}

// release frees the subnet held for name.
func (c *controller) release(name string) {
	if p, ok := c.held[name]; ok {
		_ = c.subnets.Release(p) // outside the networks: nothing to free
		delete(c.held, name)
	}
}

func getObj[T any](inf cache.SharedIndexInformer, name string) *T {
	obj, ok, err := inf.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	t, _ := obj.(*T)
	return t
}

// InternalIP returns a Node's first IPv4 InternalIP address, the address
// OpenShift SDN uses as the node's VTEP; invalid when it has none.
func InternalIP(n *corev1.Node) netip.Addr {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
			return ip
		}
	}
	return netip.Addr{}
}
