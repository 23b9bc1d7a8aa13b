package registry_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/internal/etcdtest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
)

func startEtcd(t *testing.T) (*etcdtest.Etcd, *registry.Registry) {
	t.Helper()
	e := etcdtest.Start(t, etcdtest.Options{})
	return e, e.Dial(t, pki.MasterUser)
}

var testConfig = registry.Config{
	ClusterNetworks: []master.ClusterNetwork{{CIDR: netip.MustParsePrefix("10.128.0.0/14"), HostSubnetLength: 9}},
	ServiceNetwork:  "172.30.0.0/16",
	Mode:            "multitenant",
	GlobalProjects:  []string{"infra"},
}

func runMaster(t *testing.T, ctx context.Context, reg *registry.Registry, createProjects bool) {
	t.Helper()
	m := &registry.Master{Reg: reg, Config: testConfig, CreateProjects: createProjects}
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { <-done })
}

// node is a node's registry client: its own identity, authorized by the
// master as gvs-master authorizes a node it issues a certificate to.
func node(t *testing.T, e *etcdtest.Etcd, name string) *registry.Registry {
	t.Helper()
	return e.Dial(t, e.AuthorizeNode(t, name))
}

// register registers a node on a fresh lease of ttl seconds, asking for
// want, and waits for gvs-master's answer.
func register(t *testing.T, ctx context.Context, reg *registry.Registry, name string, ip netip.Addr, ttl int64, want netip.Prefix) (clientv3.LeaseID, registry.Subnet) {
	t.Helper()
	l, err := reg.Client().Grant(ctx, ttl)
	if err != nil {
		t.Error(err)
		return 0, registry.Subnet{}
	}
	if err := reg.Register(ctx, registry.Node{Name: name, IP: ip, Want: want}, l.ID); err != nil {
		t.Error(err)
		return 0, registry.Subnet{}
	}
	s, err := reg.WaitSubnet(ctx, name, l.ID)
	if err != nil {
		t.Error(err)
	}
	return l.ID, s
}

// Two masters and 100 nodes registering at once: every node gets a subnet,
// no subnet twice; 100 projects created concurrently get distinct VNIDs.
func TestRaces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, reg := startEtcd(t)
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	runMaster(t, mctx, reg, false)
	runMaster(t, mctx, e.Dial(t, pki.MasterUser), false)

	const nodes = 100
	var wg sync.WaitGroup
	subnets := make([]registry.Subnet, nodes)
	clients := make([]*registry.Registry, nodes)
	for i := range nodes {
		clients[i] = node(t, e, fmt.Sprintf("node-%03d", i))
	}
	for i := range nodes {
		wg.Go(func() {
			_, subnets[i] = register(t, ctx, clients[i], fmt.Sprintf("node-%03d", i), netip.AddrFrom4([4]byte{192, 168, byte(i / 250), byte(i%250 + 1)}), 60, netip.Prefix{})
		})
	}
	vnids := make([]uint32, nodes)
	regs := []*registry.Registry{reg, e.Dial(t, pki.AdminUser)}
	for i := range nodes {
		wg.Go(func() {
			name := fmt.Sprintf("p%03d", i)
			m, err := regs[i%2].UpdateProjects(ctx, testConfig.GlobalProjects, func(v *master.VNIDs) error {
				_, err := v.Create(name)
				return err
			})
			if err != nil {
				t.Error(err)
				return
			}
			vnids[i] = m[name]
		})
	}
	wg.Wait()
	seen := map[netip.Prefix]string{}
	for i, s := range subnets {
		if !s.Subnet.IsValid() {
			t.Fatalf("node %d got no subnet", i)
		}
		if o, dup := seen[s.Subnet]; dup {
			t.Fatalf("subnet %v given to %s and %s", s.Subnet, o, s.Node)
		}
		seen[s.Subnet] = s.Node
	}
	seenV := map[uint32]int{}
	for i, v := range vnids {
		if v < master.MinVNID {
			t.Fatalf("project %d got VNID %d", i, v)
		}
		if o, dup := seenV[v]; dup {
			t.Fatalf("VNID %d given to p%03d and p%03d", v, o, i)
		}
		seenV[v] = i
	}
	// The registry agrees.
	all, _, err := reg.Subnets(ctx)
	if err != nil || len(all) != nodes {
		t.Fatalf("registry has %d subnets (%v)", len(all), err)
	}
	projects, err := reg.Projects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if projects["default"] != 0 || projects["infra"] != 0 || len(projects) != nodes+2 {
		t.Errorf("projects: default=%d infra=%d n=%d", projects["default"], projects["infra"], len(projects))
	}
}

func TestProjectOps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, reg := startEtcd(t)
	op := func(fn func(*master.VNIDs) error) map[string]uint32 {
		t.Helper()
		m, err := reg.UpdateProjects(ctx, nil, fn)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	op(func(v *master.VNIDs) error {
		for _, p := range []string{"default", "a", "b"} {
			if _, err := v.Create(p); err != nil {
				return err
			}
		}
		return nil
	})
	m := op(func(v *master.VNIDs) error { return v.Join("a", "b") })
	if m["a"] != 10 || m["b"] != 10 {
		t.Fatalf("after join: %v", m)
	}
	vk, err := reg.Client().Get(ctx, registry.VNIDKey(11))
	if err != nil || len(vk.Kvs) != 0 {
		t.Errorf("VNID 11 not released: %v %v", vk, err)
	}
	vk, _ = reg.Client().Get(ctx, registry.VNIDKey(10))
	if len(vk.Kvs) != 1 || string(vk.Kvs[0].Value) != `{"projects":["a","b"]}` {
		t.Errorf("VNID 10 record: %v", vk.Kvs)
	}
	m = op(func(v *master.VNIDs) error { return v.Isolate("b") })
	if m["b"] != 12 {
		t.Errorf("isolated b = %d, want 12 (cursor persisted)", m["b"])
	}
	if _, err := reg.UpdateProjects(ctx, nil, func(v *master.VNIDs) error { return v.Isolate("default") }); err == nil {
		t.Error("isolate default accepted")
	}
}

// A master restarted (and etcd restarted on the same data) carries on
// without handing out a subnet twice; a node past its lease loses its
// subnet and, registering again, gets a fresh one.
func TestRestartAndLeaseExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, reg := startEtcd(t)
	mctx, mcancel := context.WithCancel(ctx)
	m := &registry.Master{Reg: reg, Config: testConfig}
	mdone := make(chan struct{})
	go func() { defer close(mdone); _ = m.Run(mctx) }()
	_, a := register(t, ctx, node(t, e, "a"), "a", netip.MustParseAddr("192.168.0.1"), 60, netip.Prefix{})
	_, b := register(t, ctx, node(t, e, "b"), "b", netip.MustParseAddr("192.168.0.2"), 60, netip.Prefix{})
	mcancel()
	<-mdone
	e.Stop()

	e.Restart()
	reg2 := e.Dial(t, pki.MasterUser)
	runMaster(t, ctx, reg2, false)
	nc := node(t, e, "c")
	_, cSub := register(t, ctx, nc, "c", netip.MustParseAddr("192.168.0.3"), 2, netip.Prefix{})
	for _, o := range []registry.Subnet{a, b} {
		if o.Subnet == cSub.Subnet {
			t.Fatalf("restarted master gave c %v, already %s's", cSub.Subnet, o.Node)
		}
	}
	// c stops renewing: after its TTL, node record, subnet and claim go.
	waitGone(t, ctx, reg2, registry.SubnetKey("c"))
	if r, _ := reg2.Client().Get(ctx, registry.ClaimKey(cSub.Subnet)); len(r.Kvs) != 0 {
		t.Error("claim of c's subnet survived the lease")
	}
	// d registers and c comes back: both get fresh subnets, none reused.
	_, d := register(t, ctx, node(t, e, "d"), "d", netip.MustParseAddr("192.168.0.4"), 60, netip.Prefix{})
	_, c2 := register(t, ctx, nc, "c", netip.MustParseAddr("192.168.0.3"), 60, netip.Prefix{})
	got := map[netip.Prefix]string{}
	for _, s := range []registry.Subnet{a, b, d, c2} {
		if o, dup := got[s.Subnet]; dup {
			t.Fatalf("%v given to %s and %s", s.Subnet, o, s.Node)
		}
		got[s.Subnet] = s.Node
	}
	if c2.Subnet == cSub.Subnet {
		t.Errorf("returning c took back %v instead of a fresh subnet", c2.Subnet)
	}
}

// waitGone waits until key is deleted (a lease expiring).
func waitGone(t *testing.T, ctx context.Context, reg *registry.Registry, key string) {
	t.Helper()
	r, err := reg.Client().Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return
	}
	for wr := range reg.Client().Watch(ctx, key, clientv3.WithRev(r.Header.Revision+1)) {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return
			}
		}
	}
	t.Fatalf("%s still there: %v", key, ctx.Err())
}

// A node gets the subnet it asks for when nobody claims it, and never one
// another node claims: not by asking for it, and not when the registry is
// damaged so that its subnet record names another node's subnet (the
// master then gives it a subnet of its own, and the claim stays).
func TestSubnetClaimsAreTheMastersWord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, reg := startEtcd(t)
	runMaster(t, ctx, reg, false)
	x := netip.MustParsePrefix("10.128.4.0/23")
	lb, b := register(t, ctx, node(t, e, "b"), "b", netip.MustParseAddr("192.168.0.2"), 60, x)
	if b.Subnet != x {
		t.Fatalf("b asking for the free %v got %v", x, b.Subnet)
	}
	na := node(t, e, "a")
	la, a := register(t, ctx, na, "a", netip.MustParseAddr("192.168.0.1"), 60, x)
	if !a.Subnet.IsValid() || a.Subnet == x {
		t.Fatalf("a asking for b's %v got %v", x, a.Subnet)
	}
	// A wanted subnet outside the cluster network is ignored too.
	_, c := register(t, ctx, node(t, e, "c"), "c", netip.MustParseAddr("192.168.0.3"), 60, netip.MustParsePrefix("10.0.0.0/23"))
	if !testConfig.ClusterNetworks[0].CIDR.Contains(c.Subnet.Addr()) {
		t.Errorf("c got %v outside the cluster network", c.Subnet)
	}
	// Damage (an administrator's mistake): a's record names b's subnet.
	// The master, seeing a register again (on a fresh lease, as a node
	// does), gives a a subnet of its own.
	if _, err := reg.Client().Put(ctx, registry.SubnetKey("a"), `{"node":"a","ip":"192.168.0.1","subnet":"10.128.4.0/23"}`, clientv3.WithLease(la)); err != nil {
		t.Fatal(err)
	}
	la2, err := na.Client().Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if err := na.Register(ctx, registry.Node{Name: "a", IP: netip.MustParseAddr("192.168.0.1")}, la2.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "a's damaged record to be repaired", func() (bool, error) {
		subs, _, err := reg.Subnets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mine registry.Subnet
		for _, s := range subs {
			if s.Node == "a" {
				mine = s
			}
		}
		return mine.Subnet.IsValid() && mine.Subnet != x, fmt.Errorf("a's record %v", mine)
	})
	r, err := reg.Client().Get(ctx, registry.ClaimKey(x))
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "b" {
		t.Errorf("claim of %v: %v %v, want b's", x, r, err)
	}
	subs, _, err := reg.Subnets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if s.Node == "b" && (s.Subnet != x || clientv3.LeaseID(s.Lease) != lb) {
			t.Errorf("b's subnet record %+v, want %v answering lease %x", s, x, lb)
		}
	}
}

// TestNodeKeepsItsLease: a node renews its lease, with its own (least
// privilege) identity, after gvs-master has given it a subnet. etcd renews
// a lease only for a user who may write every key attached to it, so the
// master's records must not be on the node's lease: when they were, every
// node lost its lease each TTL and re-registered, and every other node saw
// it leave and come back. When the node stops renewing, its lease expires
// and the master releases the subnet.
func TestNodeKeepsItsLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, reg := startEtcd(t)
	runMaster(t, ctx, reg, false)
	na := node(t, e, "a")
	// A 5 s lease watched for 12 s: more than two lifetimes, so a lease that
	// is not renewed expires within the watch; shorter ones expired on a
	// loaded machine whose etcd stalled longer than the lease.
	lease, s := register(t, ctx, na, "a", netip.MustParseAddr("192.168.0.1"), 5, netip.Prefix{})
	if !s.Subnet.IsValid() {
		t.Fatal("no subnet")
	}
	kctx, stop := context.WithCancel(ctx)
	ch, err := na.Client().KeepAlive(kctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	renewals := 0
	timeout := time.After(12 * time.Second)
renew:
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("the node's lease renewal ended after %d renewals (refused?)", renewals)
			}
			renewals++
		case <-timeout:
			break renew
		}
	}
	r, err := reg.Client().Get(ctx, registry.NodeKey("a"))
	if err != nil || len(r.Kvs) != 1 || clientv3.LeaseID(r.Kvs[0].Lease) != lease {
		t.Fatalf("node record after 12 s of a 5 s lease: %v %v", r, err)
	}
	subs, _, err := reg.Subnets(ctx)
	if err != nil || len(subs) != 1 || subs[0] != s {
		t.Fatalf("subnets after 12 s: %v %v, want %v", subs, err, s)
	}
	stop()
	testutil.WaitFor(t, 20*time.Second, "the subnet's release after the node's lease expired", func() (bool, error) {
		subs, _, err := reg.Subnets(ctx)
		return err == nil && len(subs) == 0, fmt.Errorf("subnets %v %v", subs, err)
	})
	if r, err := reg.Client().Get(ctx, registry.ClaimKey(s.Subnet)); err != nil || len(r.Kvs) != 0 {
		t.Errorf("claim left after the release: %v %v", r, err)
	}
}

// A node's address must be its own: the master gives no subnet to a node
// registering with another node's address, nor with a non-unicast one.
func TestNodeAddressRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, reg := startEtcd(t)
	runMaster(t, ctx, reg, false)
	register(t, ctx, node(t, e, "a"), "a", netip.MustParseAddr("192.168.0.1"), 60, netip.Prefix{})
	for name, ip := range map[string]string{"b": "192.168.0.1", "c": "0.0.0.0", "d": "224.0.0.1", "f": "127.0.0.1"} {
		n := node(t, e, name)
		l, err := n.Client().Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Register(ctx, registry.Node{Name: name, IP: netip.MustParseAddr(ip)}, l.ID); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		if s, err := n.WaitSubnet(wctx, name, l.ID); err == nil {
			t.Errorf("node %s with address %s got subnet %v", name, ip, s.Subnet)
		}
		wcancel()
		if _, err := reg.AssignSubnet(ctx, testConfig.ClusterNetworks, name); !errors.Is(err, registry.ErrBadNodeRecord) {
			t.Errorf("assign to %s (%s): %v, want ErrBadNodeRecord", name, ip, err)
		}
	}
}

// A node asks for a project it has a pod for: the master creates it with
// a fresh VNID of its own, never 0, and deletes the request; with creation
// off, the request is refused and nothing is created.
func TestProjectRequests(t *testing.T) {
	for _, create := range []bool{true, false} {
		t.Run(fmt.Sprintf("create=%v", create), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e, reg := startEtcd(t)
			runMaster(t, ctx, reg, create)
			n := node(t, e, "n1")
			register(t, ctx, n, "n1", netip.MustParseAddr("192.168.0.1"), 60, netip.Prefix{})
			if err := n.RequestProject(ctx, "n1", "gamma"); err != nil {
				t.Fatal(err)
			}
			if err := n.RequestProject(ctx, "n1", "Bad_Name"); err == nil {
				t.Error("a request for an invalid project name was sent")
			}
			waitGone(t, ctx, reg, registry.RequestsPrefix+"n1/gamma")
			projects, err := reg.Projects(ctx)
			if err != nil {
				t.Fatal(err)
			}
			v, ok := projects["gamma"]
			switch {
			case create && (!ok || v < master.MinVNID):
				t.Errorf("gamma: %d %v, want a fresh VNID", v, ok)
			case create && v == projects["default"]:
				t.Errorf("gamma shares default's VNID")
			case !create && ok:
				t.Errorf("gamma created (VNID %d) with creation off", v)
			}
		})
	}
}
