package daemon

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

	"github.com/gvswitch/gvs/sdn/registry"
)

// agent is the node's control-plane follower: it keeps the node registered
// on a lease, and mirrors the registry's node subnets (remote-node rules)
// and project VNIDs (pod re-tagging) into the daemon. When etcd is
// unreachable the daemon keeps forwarding on the last state it saw; the
// watch resumes from its last revision when etcd returns, or re-lists
// everything if that revision was compacted meanwhile.
type agent struct {
	d    sink
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

	// follow's state, guarded by fmu (follow, and resubnet from keepAlive).
	fmu      sync.Mutex
	remotes  map[string]registry.Subnet // by node name, without this node
	refused  map[string]registry.Subnet // remote nodes the daemon refused (subnet overlapping ours)
	projects map[string]uint32
	wg       sync.WaitGroup
}

// sink is what the agent drives: the Daemon, or a counter in the scale test.
type sink interface {
	AddRemote(PeerConfig) error
	RemoveRemote(netip.Addr) error
	SetProjectVNID(project string, vnid uint32) error
	ChangeSubnet(netip.Prefix) error
}

func newAgent(cli *clientv3.Client, node registry.Node, ttl int64, d sink, log *slog.Logger) *agent {
	return &agent{d: d, cli: cli, reg: registry.New(cli), log: log, node: node, ttl: ttl,
		remotes: map[string]registry.Subnet{}, refused: map[string]registry.Subnet{}, projects: map[string]uint32{}}
}

// startAgent connects to etcd, waits for gvs-master's configuration,
// registers the node and waits for its subnet; it completes d.cfg and
// d.node from the registry. It must run before setup.
func (d *Daemon) startAgent(ctx context.Context) (*agent, error) {
	dc := d.cfg.dialConfig(d.log)
	if !dc.TLS.IsZero() {
		tc, err := dc.TLS.NewClient()
		if err != nil {
			return nil, fmt.Errorf("etcdTLS: %w", err)
		}
		dc.Client = tc
		d.regTLS.Store(tc)
	}
	cli, err := registry.Dial(dc)
	if err != nil {
		return nil, err
	}
	ip, err := netip.ParseAddr(d.cfg.NodeIP)
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("nodeIP: %w", err)
	}
	a := newAgent(cli, registry.Node{Name: d.cfg.NodeName, IP: ip}, 0, d, d.log.With("component", "agent"))
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
		a.log.Warn("waiting for the cluster configuration", "etcd", d.cfg.EtcdEndpoints, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if len(d.cfg.ClusterNetworks) == 0 {
		for _, cn := range rc.ClusterNetworks {
			d.cfg.ClusterNetworks = append(d.cfg.ClusterNetworks, cn.CIDR.String())
		}
	}
	if d.cfg.ServiceNetwork == "" {
		d.cfg.ServiceNetwork = rc.ServiceNetwork
	}
	if d.cfg.Mode == "" {
		d.cfg.Mode = rc.Mode
	}
	if d.cfg.VXLANPort == 0 {
		d.cfg.VXLANPort = rc.VXLANPort
	}
	a.ttl = rc.NodeLeaseTTL
	if a.ttl <= 0 {
		a.ttl = 10
	}
	var want netip.Prefix
	remembered := false
	if d.cfg.Subnet != "" {
		if want, err = netip.ParsePrefix(d.cfg.Subnet); err != nil {
			return nil, fmt.Errorf("subnet: %w", err)
		}
	} else if p, ok := d.rememberedSubnet(); ok {
		want, remembered = p, true // ask for it back after a restart past the lease
	}
	sub, err := a.register(ctx, want)
	if err != nil {
		return nil, err
	}
	if want.IsValid() && sub != want {
		if !remembered {
			return nil, fmt.Errorf("configured subnet %v is held by another node (registry gave %v)", want, sub)
		}
		a.log.Error("the subnet this node had before its restart went to another node; it has a fresh one and its pods' CNI leases are stale",
			"old", want, "new", sub)
		d.subnet.previous, d.subnet.changes = want, 1
	}
	d.cfg.Subnet = sub.String()
	d.rememberSubnet(sub)
	if d.node, err = d.cfg.Node(); err != nil {
		return nil, fmt.Errorf("configuration from the registry: %w", err)
	}
	// Project VNIDs before the static pods are attached.
	projects, err := a.reg.Projects(ctx)
	if err != nil {
		return nil, err
	}
	for name, v := range projects {
		d.projects.set(name, v)
	}
	d.projects.setRequester(a.requestProject)
	a.projects = projects
	a.log.Info("registered", "node", a.node.Name, "ip", ip, "subnet", sub, "projects", len(projects))
	a.startFollow(ctx)
	ok = true
	return a, nil
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

// resubnet moves the daemon from subnet from to subnet to (invalid: none)
// and re-applies the remote nodes it had to refuse because their subnets
// overlapped the one it held. The old subnet may belong to another node by
// now, so the move is not optional: ChangeSubnet changes nothing when it
// fails, and resubnet tries again, with backoff, until it succeeds or ctx
// ends, logging every failure. The registry's word stands, so the agent
// records the new subnet either way.
func (a *agent) resubnet(ctx context.Context, from, to netip.Prefix) {
	backoff := 100 * time.Millisecond
	for {
		err := a.d.ChangeSubnet(to)
		if err == nil {
			break
		}
		a.log.Error("reconfiguring the node for its new subnet; retrying", "old", subnetString(from), "new", subnetString(to), "in", backoff, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		break
	}
	a.mu.Lock()
	a.subnet = to
	a.mu.Unlock()
	if to.IsValid() {
		a.log.Warn("the node moved to a fresh subnet", "old", subnetString(from), "new", to)
	}
	a.fmu.Lock()
	for name, s := range a.refused {
		delete(a.refused, name)
		a.applySubnet(name, s)
	}
	a.fmu.Unlock()
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
				a.apply(ev.Type == clientv3.EventTypeDelete, string(ev.Kv.Key), ev.Kv.Value)
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

// resync reads subnets and projects at one revision and applies the
// difference with what the daemon has.
func (a *agent) resync(ctx context.Context) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := a.cli.Txn(rctx).Then(
		clientv3.OpGet(registry.SubnetsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(registry.ProjectsPrefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		seen[string(kv.Key)] = true
		a.apply(false, string(kv.Key), kv.Value)
	}
	for _, name := range a.knownNodes() {
		if !seen[registry.SubnetKey(name)] {
			a.apply(true, registry.SubnetKey(name), nil)
		}
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		seen[string(kv.Key)] = true
		a.apply(false, string(kv.Key), kv.Value)
	}
	for _, name := range a.knownProjects() {
		if !seen[registry.ProjectKey(name)] {
			a.apply(true, registry.ProjectKey(name), nil)
		}
	}
	return resp.Header.Revision, nil
}

// knownNodes and knownProjects list the remote nodes (added or refused)
// and projects the agent mirrors.
func (a *agent) knownNodes() []string {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	return append(slices.Collect(maps.Keys(a.remotes)), slices.Collect(maps.Keys(a.refused))...)
}

func (a *agent) knownProjects() []string {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	return slices.Collect(maps.Keys(a.projects))
}

// apply mirrors one registry key into the daemon.
func (a *agent) apply(deleted bool, key string, val []byte) {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	switch {
	case strings.HasPrefix(key, registry.SubnetsPrefix):
		name := strings.TrimPrefix(key, registry.SubnetsPrefix)
		if name == a.node.Name {
			return
		}
		old, had := a.remotes[name]
		if deleted {
			delete(a.refused, name)
			if had {
				delete(a.remotes, name)
				if err := a.d.RemoveRemote(old.IP); err != nil {
					a.log.Error("remove remote node", "node", name, "err", err)
				}
				a.log.Info("remote node removed", "node", name, "ip", old.IP, "subnet", old.Subnet)
			}
			return
		}
		var s registry.Subnet
		if err := json.Unmarshal(val, &s); err != nil {
			a.log.Warn("bad subnet record", "key", key, "err", err)
			return
		}
		a.applySubnet(name, s)
	case strings.HasPrefix(key, registry.ProjectsPrefix):
		a.applyProject(deleted, key, val)
	}
}

// applySubnet installs (or updates) a remote node's rules; a.fmu is held.
// A node whose subnet overlaps this node's is refused and remembered: it
// holds this node's old subnet (this node was cut off past its lease), and
// is added once this node moves to a fresh subnet (resubnet).
func (a *agent) applySubnet(name string, s registry.Subnet) {
	old, had := a.remotes[name]
	if had && old == s {
		return
	}
	if had && old.IP != s.IP {
		delete(a.remotes, name)
		_ = a.d.RemoveRemote(old.IP)
	}
	err := a.d.AddRemote(PeerConfig{Name: name, IP: s.IP.String(), Subnet: s.Subnet.String()})
	if err != nil {
		if had && old.IP == s.IP { // its old rules must not stay
			delete(a.remotes, name)
			_ = a.d.RemoveRemote(old.IP)
		}
		a.mu.Lock()
		mine := a.subnet
		a.mu.Unlock()
		if s.Subnet.Overlaps(mine) {
			a.refused[name] = s
			a.log.Error("remote node holds this node's subnet: this node's lease expired and the subnet was given away; waiting to re-register",
				"node", name, "subnet", s.Subnet)
			return
		}
		a.log.Error("add remote node", "node", name, "err", err)
		return
	}
	delete(a.refused, name)
	a.remotes[name] = s
	a.log.Info("remote node added", "node", name, "ip", s.IP, "subnet", s.Subnet)
}

// applyProject mirrors a project's VNID; a.fmu is held.
func (a *agent) applyProject(deleted bool, key string, val []byte) {
	name := strings.TrimPrefix(key, registry.ProjectsPrefix)
	if deleted {
		delete(a.projects, name)
		return
	}
	var p registry.Project
	if err := json.Unmarshal(val, &p); err != nil {
		a.log.Warn("bad project record", "key", key, "err", err)
		return
	}
	if old, ok := a.projects[name]; ok && old == p.VNID {
		return
	}
	a.projects[name] = p.VNID
	if err := a.d.SetProjectVNID(name, p.VNID); err != nil {
		a.log.Error("re-tag project", "project", name, "err", err)
	}
}
