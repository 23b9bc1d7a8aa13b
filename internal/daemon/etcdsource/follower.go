// Package etcdsource is gvs-switchd's follower of the etcd registry (docs/
// control-plane.md): it registers the node on a lease, answers for its
// subnet, and translates the registry's keys (node subnets, project VNIDs,
// services, the policy state) into the calls of a source.Mirror, which
// drives the node as it does for the Kubernetes follower
// (internal/daemon/kubesource). When etcd is unreachable the node keeps
// forwarding on the last state it saw.
package etcdsource

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/registry"
)

// agent is the node's control-plane follower: it keeps the node registered
// on a lease, and hands the registry's keys to the Mirror. When etcd is
// unreachable the node keeps forwarding on the last state it saw; the
// watch resumes from its last revision when etcd returns, or re-lists
// everything if that revision was compacted meanwhile.
type agent struct {
	d    source.Sink
	cli  *clientv3.Client
	reg  *registry.Registry
	log  *slog.Logger
	node registry.Node
	ttl  int64

	mu     sync.Mutex
	lease  clientv3.LeaseID
	subnet netip.Prefix
	// ctx and cancel bound the agent's goroutines (startFollow); interim
	// stops register's keep-alive once keepAlive runs.
	ctx     context.Context
	cancel  context.CancelFunc
	interim context.CancelFunc

	// m drives d (made on first use, mirror); a.mu guards the pointer.
	m *source.Mirror

	// follow's state, guarded by fmu.
	fmu sync.Mutex
	// known holds the keys applied and not deleted since, for resync to
	// find what was deleted meanwhile.
	known map[string]bool
	// egress holds each node's egress IPs: its own record's and gvs-master's
	// assignment, by key (applyEgressIPs).
	egress map[string][]netip.Addr
	// nsLabels are the namespace labels records (policies.go).
	nsLabels map[string]map[string]string
	// synced is closed after the first full listing (WaitForSync).
	synced     chan struct{}
	syncedOnce sync.Once
	// podsChanged wakes PublishPods.
	podsChanged chan struct{}
	wg          sync.WaitGroup
}

func newAgent(cli *clientv3.Client, node registry.Node, ttl int64, d source.Sink, log *slog.Logger) *agent {
	return &agent{d: d, cli: cli, reg: registry.New(cli), log: log, node: node, ttl: ttl,
		known: map[string]bool{}, egress: map[string][]netip.Addr{}, nsLabels: map[string]map[string]string{}, synced: make(chan struct{}),
		podsChanged: make(chan struct{}, 1)}
}

// mirror returns the Mirror that drives the node, made on first use
// (after Follow, or a test, set a.d, and register the subnet).
func (a *agent) mirror() *source.Mirror {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = source.NewMirror(a.d, source.MirrorConfig{Node: a.node.Name, Subnet: a.subnet, Logger: a.log})
	}
	return a.m
}

// Config says how a node follows the registry.
type Config struct {
	// Dial reaches etcd (TLS with the node's certificate).
	Dial registry.DialConfig
	// Node is this node's name and underlay address.
	Node registry.Node
	// Want is the subnet the node asks for: one it is configured with (it
	// must get it), or, with Remembered, the one it had before a restart
	// (it gets it back if nobody took it).
	Want       netip.Prefix
	Remembered bool
	Logger     *slog.Logger
}

// Follower follows the registry for one node (a source.ControlPlane that
// also requests projects, publishes pods and keeps a lease).
type Follower struct {
	cfg Config
	a   *agent // Start's
}

var (
	_ source.ControlPlane     = (*Follower)(nil)
	_ source.ProjectRequester = (*Follower)(nil)
	_ source.PodPublisher     = (*Follower)(nil)
	_ source.KeepAliver       = (*Follower)(nil)
)

// New returns a follower of the registry for cfg; Start connects.
func New(cfg Config) *Follower { return &Follower{cfg: cfg} }

// Start connects to etcd, waits for gvs-master's configuration, registers
// the node and waits for its subnet, and reads the projects. The node then
// calls Follow (before attaching its static pods, which wait for their
// projects' VNIDs) and KeepAlive (once it serves).
func (f *Follower) Start(ctx context.Context) (source.Bootstrap, error) {
	var b source.Bootstrap
	cfg := f.cfg
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cli, err := registry.Dial(cfg.Dial)
	if err != nil {
		return b, err
	}
	a := newAgent(cli, cfg.Node, 0, nil, log)
	ok := false
	defer func() {
		if !ok {
			cli.Close()
		}
	}()
	var rc registry.Config
	for {
		rc, err = a.reg.GetConfig(ctx)
		if err == nil {
			break
		}
		a.log.Warn("waiting for the cluster configuration", "etcd", cfg.Dial.Endpoints, "err", err)
		select {
		case <-ctx.Done():
			return b, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if b.Cluster, err = clusterOf(rc); err != nil {
		return b, err
	}
	a.ttl = rc.NodeLeaseTTL
	if a.ttl <= 0 {
		a.ttl = 10
	}
	b.NodeIP = cfg.Node.IP
	if b.Subnet, err = a.register(ctx, cfg.Want); err != nil {
		return b, err
	}
	if cfg.Want.IsValid() && b.Subnet != cfg.Want {
		if !cfg.Remembered {
			return b, fmt.Errorf("configured subnet %v is held by another node (registry gave %v)", cfg.Want, b.Subnet)
		}
		a.log.Error("the subnet this node had before its restart went to another node; it has a fresh one and its pods' CNI leases are stale",
			"old", cfg.Want, "new", b.Subnet)
		b.Lost = cfg.Want
	}
	if b.Projects, err = a.reg.Projects(ctx); err != nil {
		return b, err
	}
	a.log.Info("registered", "node", a.node.Name, "ip", a.node.IP, "subnet", b.Subnet, "projects", len(b.Projects))
	ok = true
	f.a = a
	return b, nil
}

// clusterOf reads gvs-master's published configuration.
func clusterOf(rc registry.Config) (source.Cluster, error) {
	c := source.Cluster{Mode: sdn.Mode(rc.Mode), VXLANPort: rc.VXLANPort}
	for _, cn := range rc.ClusterNetworks {
		c.ClusterNetworks = append(c.ClusterNetworks, cn.CIDR)
	}
	if rc.ServiceNetwork != "" {
		p, err := netip.ParsePrefix(rc.ServiceNetwork)
		if err != nil {
			return c, fmt.Errorf("the registry's service network: %w", err)
		}
		c.ServiceNetwork = p
	}
	return c, nil
}

// Follow starts mirroring the registry into sink, until ctx ends or Close.
func (f *Follower) Follow(ctx context.Context, sink source.Sink) {
	f.a.mu.Lock()
	f.a.d = sink
	f.a.mu.Unlock()
	f.a.startFollow(ctx)
}

// KeepAlive takes over renewing the node's lease (Start renews it
// meanwhile) and registers the node again whenever the lease is lost.
func (f *Follower) KeepAlive() { f.a.startKeepAlive() }

// RequestProject asks gvs-master to create a project the node has a pod
// of (it gets a fresh VNID, or gvs-master refuses).
func (f *Follower) RequestProject(ctx context.Context, project string) error {
	return f.a.requestProject(ctx, project)
}

// Close stops following; the lease is left to expire, so a quick restart
// keeps the node's subnet.
func (f *Follower) Close() {
	if f.a != nil {
		f.a.close()
	}
}

// register takes a lease and publishes the node, asking for subnet want
// (none: any), and waits for gvs-master's answer: the node's subnet on that
// lease.
func (a *agent) register(ctx context.Context, want netip.Prefix) (netip.Prefix, error) {
	l, err := a.cli.Grant(ctx, a.ttl)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("lease: %w", err)
	}
	n := a.node
	n.Want = want
	if err := a.reg.Register(ctx, n, l.ID); err != nil {
		return netip.Prefix{}, err
	}
	// Renew the lease while gvs-master answers, which may take longer
	// than its TTL when gvs-master is down, and until keepAlive takes
	// over (startKeepAlive).
	kctx, kcancel := context.WithCancel(ctx)
	kch, err := a.cli.KeepAlive(kctx, l.ID)
	if err != nil {
		kcancel()
		return netip.Prefix{}, fmt.Errorf("lease: %w", err)
	}
	go func() {
		for range kch {
		}
	}()
	s, err := a.reg.WaitSubnet(ctx, a.node.Name, l.ID)
	if err != nil {
		kcancel()
		return netip.Prefix{}, err
	}
	a.mu.Lock()
	a.lease, a.subnet = l.ID, s.Subnet
	if a.interim != nil {
		a.interim()
	}
	a.interim = kcancel
	a.mu.Unlock()
	return s.Subnet, nil
}

// run starts following the registry (unless startFollow did already)
// and keeping the lease alive, until ctx is done or close is called.
func (a *agent) run(ctx context.Context) {
	a.startFollow(ctx)
	a.startKeepAlive()
}

// startFollow starts mirroring the registry into the daemon. startAgent
// calls it before the static pods are attached, which wait for their
// projects' VNIDs.
func (a *agent) startFollow(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ctx != nil {
		return
	}
	a.ctx, a.cancel = context.WithCancel(ctx)
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.follow(a.ctx) }()
}

// startKeepAlive takes over renewing the lease from register's interim
// keep-alive (which covers the time the daemon spends setting up).
func (a *agent) startKeepAlive() {
	a.mu.Lock()
	ctx, stop := a.ctx, a.interim
	a.interim = nil
	a.mu.Unlock()
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.keepAlive(ctx) }()
	if stop != nil {
		stop()
	}
}

// close stops the agent; the node's lease is left to expire, so a quick
// restart keeps the node's subnet.
func (a *agent) close() {
	a.mu.Lock()
	cancel, stop := a.cancel, a.interim
	a.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if stop != nil {
		stop()
	}
	a.wg.Wait()
	a.cli.Close()
}

// keepAlive renews the lease; when it is lost (etcd unreachable for longer
// than the TTL, or the lease expired) it registers again with a new lease
// (reregister). Until then the node forwards on its last-known state.
func (a *agent) keepAlive(ctx context.Context) {
	for ctx.Err() == nil {
		a.mu.Lock()
		lease := a.lease
		a.mu.Unlock()
		ch, err := a.cli.KeepAlive(ctx, lease)
		if err == nil {
			for range ch {
			}
		}
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("node lease lost; registering again", "lease", int64(lease))
		var last string
		for ctx.Err() == nil {
			err := a.reregister(ctx)
			if err == nil {
				break
			}
			last = logRetry(a.log, last, err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// logRetry logs a failed attempt to register again: at Warn when its
// message differs from the previous attempt's (last), so that an error
// that needs the operator (registry.ErrClaimMismatch says what to repair)
// is seen, at Debug while etcd keeps answering the same (unreachable). It
// returns the message for the next call.
func logRetry(log *slog.Logger, last string, err error) string {
	msg := err.Error()
	if msg != last {
		log.Warn("registering again failed; retrying every second", "err", err)
	} else {
		log.Debug("register", "err", err)
	}
	return msg
}

// reregister registers the node again on a fresh lease, asking for the
// subnet it forwards with. gvs-master gives it back only if no other node
// claimed it meanwhile (a compare-and-swap on the subnet's claim key), so
// the node never takes back a subnet given to another node. If another
// node holds it, the node withdraws it at once (resubnet), waits for
// gvs-master to allocate a fresh one while keeping the new lease alive,
// and moves to it.
func (a *agent) reregister(ctx context.Context) error {
	a.mu.Lock()
	have := a.subnet
	a.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	holder, err := "", error(nil)
	if have.IsValid() {
		holder, err = a.reg.ClaimHolder(rctx, have)
	}
	var l *clientv3.LeaseGrantResponse
	if err == nil {
		l, err = a.cli.Grant(rctx, a.ttl)
	}
	if err == nil {
		n := a.node
		n.Want = have
		err = a.reg.Register(rctx, n, l.ID)
	}
	cancel()
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.lease = l.ID
	a.mu.Unlock()
	select { // the pods' addresses go on the new lease
	case a.podsChanged <- struct{}{}:
	default:
	}
	if holder != "" && holder != a.node.Name {
		a.log.Error("this node's subnet was given to another node while it was cut off past its lease; withdrawing it",
			"subnet", have, "holder", holder)
		a.resubnet(ctx, have, netip.Prefix{})
		have = netip.Prefix{}
	}
	// Wait for gvs-master's answer, renewing the new lease meanwhile; if
	// the lease is lost again, give up and let keepAlive start over.
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	kch, err := a.cli.KeepAlive(kctx, l.ID)
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	go func() {
		for range kch {
		}
		kcancel()
	}()
	a.log.Info("registered again; waiting for gvs-master's answer", "asked", subnetString(have))
	s, err := a.reg.WaitSubnet(kctx, a.node.Name, l.ID)
	if err != nil {
		return err
	}
	if s.Subnet == have {
		a.log.Info("registered again; the node kept its subnet", "subnet", s.Subnet)
		return nil
	}
	a.resubnet(ctx, have, s.Subnet)
	return nil
}

// requestProject asks gvs-master to create a project a pod needs
// (projects.wait calls it once per wait).
func (a *agent) requestProject(ctx context.Context, project string) error {
	return a.reg.RequestProject(ctx, a.node.Name, project)
}

// resubnet moves the node from subnet from to subnet to (invalid: none)
// through the Mirror, which retries until the node takes it and then
// tries again the remote nodes it refused for overlapping the old one. The
// registry's word stands, so the agent records the new subnet either way.
func (a *agent) resubnet(ctx context.Context, from, to netip.Prefix) {
	a.mirror().MoveSubnet(ctx, to)
	a.mu.Lock()
	a.subnet = to
	a.mu.Unlock()
	if to.IsValid() {
		a.log.Warn("the node moved to a fresh subnet", "old", subnetString(from), "new", to)
	}
}

// follow lists, then watches, the registry's subnets and projects.
func (a *agent) follow(ctx context.Context) { a.followFrom(ctx, 0) }

// followFrom follows from revision rev+1, or lists first when rev is 0.
func (a *agent) followFrom(ctx context.Context, rev int64) {
	relist := rev == 0
	down := false
	for ctx.Err() == nil {
		if relist {
			r, err := a.resync(ctx)
			if err != nil {
				if !down {
					a.log.Warn("registry unreachable; forwarding on the last known state", "err", err)
					down = true
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			if down {
				a.log.Info("registry reachable again; state re-listed", "revision", r)
				down = false
			}
			rev, relist = r, false
		}
		wctx, cancel := context.WithCancel(ctx)
		wc := a.cli.Watch(wctx, registry.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for wr := range wc {
			if wr.CompactRevision != 0 {
				a.log.Info("watch revision compacted; re-listing", "compacted", wr.CompactRevision)
				relist = true
				break
			}
			if err := wr.Err(); err != nil {
				a.log.Warn("watch error; resuming", "err", err)
				break
			}
			for _, ev := range wr.Events {
				a.apply(ev.Type == clientv3.EventTypeDelete, string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision)
			}
			if wr.Header.Revision > rev {
				rev = wr.Header.Revision
			}
		}
		cancel()
		if ctx.Err() == nil && !relist {
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// resync reads subnets, projects, services and the policy state at one
// revision and applies the difference with what the daemon has.
func (a *agent) resync(ctx context.Context) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := a.cli.Txn(rctx).Then(
		clientv3.OpGet(registry.SubnetsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(registry.ProjectsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(registry.ServicesPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(registry.PoliciesPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(registry.EgressFirewallsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(registry.EgressIPsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(registry.NamespaceLabelsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(registry.PodLabelsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(registry.PodsPrefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			seen[string(kv.Key)] = true
			a.apply(false, string(kv.Key), kv.Value, kv.ModRevision)
		}
	}
	for _, key := range a.knownKeys() {
		if !seen[key] {
			a.apply(true, key, nil, 0)
		}
	}
	a.syncedOnce.Do(func() { close(a.synced) })
	return resp.Header.Revision, nil
}

// knownKeys lists the keys applied and not deleted since.
func (a *agent) knownKeys() []string {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	return slices.Sorted(maps.Keys(a.known))
}

// apply hands one registry key to the Mirror; rev is its modification
// revision.
func (a *agent) apply(deleted bool, key string, val []byte, rev int64) {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	if deleted {
		delete(a.known, key)
	} else {
		a.known[key] = true
	}
	m := a.mirror()
	switch {
	case strings.HasPrefix(key, registry.SubnetsPrefix):
		name := strings.TrimPrefix(key, registry.SubnetsPrefix)
		if name == a.node.Name {
			return // this node's own: register and reregister
		}
		if deleted {
			m.RemoveRemote(name)
			return
		}
		var s registry.Subnet
		if err := json.Unmarshal(val, &s); err != nil {
			a.log.Warn("bad subnet record", "key", key, "err", err)
			return
		}
		rn := sdn.RemoteNode{Name: name, IP: s.IP, Subnet: s.Subnet}
		if s.FixedVNID != nil { // a host that is not a node (registry.RegisterHost)
			rn.FixedVNID, rn.HasFixedVNID = *s.FixedVNID, true
		}
		m.SetRemote(rn)
	case strings.HasPrefix(key, registry.ProjectsPrefix):
		name := strings.TrimPrefix(key, registry.ProjectsPrefix)
		if deleted {
			m.ForgetProject(name)
		} else {
			var p registry.Project
			if err := json.Unmarshal(val, &p); err != nil {
				a.log.Warn("bad project record", "key", key, "err", err)
				return
			}
			m.SetProjectVNID(name, p.VNID)
			m.SetProjectMulticast(name, p.Multicast)
		}
		a.sendNamespace(name) // a project is a namespace
	case strings.HasPrefix(key, registry.ServicesPrefix):
		a.applyService(m, deleted, key, val)
	case strings.HasPrefix(key, registry.EgressIPsPrefix):
		a.applyEgressIPs(m, deleted, key, val)
	default:
		a.applyPolicyState(m, deleted, key, val, rev)
	}
}

// applyService hands a service record to the Mirror; a.fmu is held. One
// the node cannot read loses its old rules.
func (a *agent) applyService(m *source.Mirror, deleted bool, key string, val []byte) {
	ns, name, valid := registry.ParseServiceKey(key)
	if !valid {
		return
	}
	if deleted {
		m.DeleteService(ns, name)
		return
	}
	var rec registry.Service
	if err := json.Unmarshal(val, &rec); err != nil {
		a.log.Warn("bad service record", "key", key, "err", err)
		return
	}
	svc, err := rec.SDN(ns, name)
	if err != nil {
		m.RefuseService(ns, name, err)
		return
	}
	m.SetService(svc)
}

func subnetString(p netip.Prefix) string {
	if !p.IsValid() {
		return "(none)"
	}
	return p.String()
}

// applyEgressIPs hands a project's or a node's egress IP record to the
// Mirror; a.fmu is held. A record it cannot read names no egress IP that
// anyone serves: a project's outbound traffic is then dropped, not
// masqueraded (its entry stays, as an invalid address).
func (a *agent) applyEgressIPs(m *source.Mirror, deleted bool, key string, val []byte) {
	var rec registry.EgressIPs
	var ips []netip.Addr
	if !deleted {
		err := json.Unmarshal(val, &rec)
		if err == nil {
			ips, err = source.ParseEgressIPs(rec.IPs)
		}
		if err != nil {
			a.log.Warn("bad egress IP record", "key", key, "err", err)
			if len(ips) == 0 {
				ips = []netip.Addr{{}}
			}
		}
	}
	if p, ok := strings.CutPrefix(key, registry.ProjectEgressPrefix); ok {
		m.SetProjectEgressIPs(p, ips)
		return
	}
	node, ok := strings.CutPrefix(key, registry.NodeEgressPrefix)
	if !ok {
		if node, ok = strings.CutPrefix(key, registry.AssignedEgressPrefix); !ok {
			return
		}
	}
	if len(ips) == 0 {
		delete(a.egress, key)
	} else {
		a.egress[key] = ips
	}
	all := slices.Concat(a.egress[registry.NodeEgressPrefix+node], a.egress[registry.AssignedEgressPrefix+node])
	m.SetNodeEgressIPs(node, all)
}
