package registry_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/sdn/registry/embedded"
)

func startEtcd(t *testing.T, dir string) (*embedded.Server, *registry.Registry) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{Dir: dir, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, dial(t, srv.ClientURL)
}

func dial(t *testing.T, url string) *registry.Registry {
	t.Helper()
	c, err := registry.Dial([]string{url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return registry.New(c)
}

var testConfig = registry.Config{
	ClusterNetworks: []master.ClusterNetwork{{CIDR: netip.MustParsePrefix("10.128.0.0/14"), HostSubnetLength: 9}},
	ServiceNetwork:  "172.30.0.0/16",
	Mode:            "multitenant",
	GlobalProjects:  []string{"infra"},
}

func runMaster(t *testing.T, ctx context.Context, reg *registry.Registry) {
	t.Helper()
	m := &registry.Master{Reg: reg, Config: testConfig}
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { <-done })
}

func register(t *testing.T, ctx context.Context, reg *registry.Registry, name string, ip netip.Addr, ttl int64) (clientv3.LeaseID, registry.Subnet) {
	t.Helper()
	l, err := reg.Client().Grant(ctx, ttl)
	if err != nil {
		t.Error(err)
		return 0, registry.Subnet{}
	}
	s, ok, err := reg.Register(ctx, registry.Node{Name: name, IP: ip}, l.ID, netip.Prefix{})
	if err != nil {
		t.Error(err)
		return 0, registry.Subnet{}
	}
	if !ok {
		if s, err = reg.WaitSubnet(ctx, name); err != nil {
			t.Error(err)
		}
	}
	return l.ID, s
}

// Two masters and 100 nodes registering at once: every node gets a subnet,
// no subnet twice; 100 projects created concurrently get distinct VNIDs.
func TestRaces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, reg := startEtcd(t, t.TempDir())
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	runMaster(t, mctx, reg)
	runMaster(t, mctx, dial(t, srv.ClientURL))

	const nodes = 100
	var wg sync.WaitGroup
	subnets := make([]registry.Subnet, nodes)
	for i := range nodes {
		wg.Go(func() {
			_, subnets[i] = register(t, ctx, reg, fmt.Sprintf("node-%03d", i), netip.AddrFrom4([4]byte{192, 168, byte(i / 250), byte(i%250 + 1)}), 60)
		})
	}
	vnids := make([]uint32, nodes)
	regs := []*registry.Registry{reg, dial(t, srv.ClientURL)}
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
	_, reg := startEtcd(t, t.TempDir())
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
	dir := t.TempDir()
	srv, err := embedded.Start(embedded.Config{Dir: dir, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := registry.Dial([]string{srv.ClientURL})
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(c)
	mctx, mcancel := context.WithCancel(ctx)
	m := &registry.Master{Reg: reg, Config: testConfig}
	mdone := make(chan struct{})
	go func() { defer close(mdone); _ = m.Run(mctx) }()
	_, a := register(t, ctx, reg, "a", netip.MustParseAddr("192.168.0.1"), 60)
	_, b := register(t, ctx, reg, "b", netip.MustParseAddr("192.168.0.2"), 60)
	mcancel()
	<-mdone
	c.Close()
	srv.Close()

	srv2, reg2 := startEtcd(t, dir)
	_ = srv2
	runMaster(t, ctx, reg2)
	lease, cSub := register(t, ctx, reg2, "c", netip.MustParseAddr("192.168.0.3"), 2)
	for _, o := range []registry.Subnet{a, b} {
		if o.Subnet == cSub.Subnet {
			t.Fatalf("restarted master gave c %v, already %s's", cSub.Subnet, o.Node)
		}
	}
	// c stops renewing: after its TTL, node record, subnet and claim go.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := reg2.Client().Get(ctx, registry.SubnetKey("c"))
		if err == nil && len(r.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("c's subnet still there after its lease")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r, _ := reg2.Client().Get(ctx, registry.ClaimKey(cSub.Subnet)); len(r.Kvs) != 0 {
		t.Error("claim of c's subnet survived the lease")
	}
	_ = lease
	// d registers and c comes back: both get fresh subnets, none reused.
	_, d := register(t, ctx, reg2, "d", netip.MustParseAddr("192.168.0.4"), 60)
	_, c2 := register(t, ctx, reg2, "c", netip.MustParseAddr("192.168.0.3"), 60)
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

// A node re-registering never writes back a claim another node holds: not
// by asking for the subnet (the claim's compare-and-swap), and not even
// when the registry is damaged so that its own subnet record names a
// subnet claimed by another node.
func TestRegisterNeverTakesAnotherNodesClaim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, reg := startEtcd(t, t.TempDir())
	c := reg.Client()
	x := netip.MustParsePrefix("10.128.0.0/23")
	lb, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, known, err := reg.Register(ctx, registry.Node{Name: "b", IP: netip.MustParseAddr("192.168.0.2")}, lb.ID, x); err != nil || !known {
		t.Fatalf("b takes the free %v: %v %v", x, known, err)
	}
	la, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	a := registry.Node{Name: "a", IP: netip.MustParseAddr("192.168.0.1")}
	if s, known, err := reg.Register(ctx, a, la.ID, x); err != nil || known {
		t.Fatalf("a asking for b's %v: %v %v %v, want registered without a subnet", x, s, known, err)
	}
	// Damage: a subnet record for a naming b's subnet.
	if _, err := c.Put(ctx, registry.SubnetKey("a"), `{"node":"a","ip":"192.168.0.1","subnet":"10.128.0.0/23"}`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.Register(ctx, a, la.ID, netip.Prefix{}); !errors.Is(err, registry.ErrClaimMismatch) ||
		!strings.Contains(err.Error(), "etcdctl del "+registry.SubnetKey(a.Name)) {
		t.Errorf("register over a damaged record: %v, want ErrClaimMismatch saying which key to delete", err)
	}
	r, err := c.Get(ctx, registry.ClaimKey(x))
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "b" || clientv3.LeaseID(r.Kvs[0].Lease) != lb.ID {
		t.Errorf("claim of %v: %v %v, want b's on b's lease", x, r, err)
	}
}
