package etcdsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/etcdtest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
	"google.golang.org/grpc/connectivity"
)

var agentTestConfig = registry.Config{
	ClusterNetworks: []master.ClusterNetwork{{CIDR: netip.MustParsePrefix("10.128.0.0/14"), HostSubnetLength: 9}},
	ServiceNetwork:  "172.30.0.0/16",
	Mode:            "multitenant",
	NodeLeaseTTL:    30,
}

func newEtcd(t *testing.T) *etcdtest.Etcd { return etcdtest.Start(t, etcdtest.Options{}) }

// testAgent registers node name as the node does, with its own identity.
func testAgent(t *testing.T, ctx context.Context, e *etcdtest.Etcd, name string, ip netip.Addr) (*agent, *countSink) {
	t.Helper()
	c, err := registry.Dial(e.DialConfig(e.AuthorizeNode(t, name)))
	if err != nil {
		t.Fatal(err)
	}
	s := &countSink{remotes: map[netip.Addr]bool{}, projects: map[string]uint32{}}
	a := newAgent(c, registry.Node{Name: name, IP: ip}, 30, s, slog.New(slog.DiscardHandler))
	if _, err := a.register(ctx, netip.Prefix{}); err != nil {
		t.Fatal(err)
	}
	return a, s
}

func waitSink(t *testing.T, s *countSink, what string, cond func(*countSink) bool) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, what, func() (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return cond(s), fmt.Errorf("remotes %v, projects %v", s.remotes, s.projects)
	})
}

// waitConn waits until the agent's etcd connection is in state want.
func waitConn(t *testing.T, ctx context.Context, a *agent, want connectivity.State) {
	t.Helper()
	conn := a.cli.ActiveConnection()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for st := conn.GetState(); st != want; st = conn.GetState() {
		if !conn.WaitForStateChange(wctx, st) {
			t.Fatalf("the agent's etcd connection stayed %v, want %v", st, want)
		}
	}
}

// startMaster runs gvs-master's allocator against e until ctx ends, and
// returns its registry (its client is closed by t.Cleanup).
func startMaster(t *testing.T, ctx context.Context, e *etcdtest.Etcd) *registry.Registry {
	t.Helper()
	reg := e.Dial(t, pki.MasterUser)
	m := &registry.Master{Reg: reg, Config: agentTestConfig, CreateProjects: true}
	go func() { _ = m.Run(ctx) }()
	return reg
}

// A node that was away while nodes came and went and the revisions it had
// seen were compacted re-lists and ends up with the registry's state.
func TestAgentRelistAfterCompaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newEtcd(t)
	reg := startMaster(t, ctx, f)
	c := reg.Client()

	b, _ := testAgent(t, ctx, f, "b", netip.MustParseAddr("192.168.0.2"))
	b.run(ctx)
	defer b.close()
	a, sa := testAgent(t, ctx, f, "a", netip.MustParseAddr("192.168.0.1"))
	defer a.cli.Close()
	rev, err := a.resync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitSink(t, sa, "b", func(s *countSink) bool { return s.remotes[netip.MustParseAddr("192.168.0.2")] })

	// While a is not watching: b leaves, x joins, a project changes VNID.
	b.close()
	if _, err := c.Revoke(ctx, b.lease); err != nil {
		t.Fatal(err)
	}
	x, _ := testAgent(t, ctx, f, "x", netip.MustParseAddr("192.168.0.9"))
	defer x.cli.Close()
	if _, err := reg.UpdateProjects(ctx, nil, func(v *master.VNIDs) error {
		if _, err := v.Create("p"); err != nil {
			return err
		}
		_, err := v.Create("q")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, "/gvs/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); a.followFrom(fctx, rev) }()
	defer func() { fcancel(); <-done }()
	waitSink(t, sa, "re-list", func(s *countSink) bool {
		return !s.remotes[netip.MustParseAddr("192.168.0.2")] && s.remotes[netip.MustParseAddr("192.168.0.9")] &&
			s.projects["p"] == 10 && s.projects["q"] == 11
	})
	// And it watches again afterwards.
	if _, err := reg.UpdateProjects(ctx, nil, func(v *master.VNIDs) error { return v.Join("p", "q") }); err != nil {
		t.Fatal(err)
	}
	waitSink(t, sa, "join after re-list", func(s *countSink) bool { return s.projects["q"] == 10 })
}

// etcd restarts (same data, same address): the agent keeps its state while
// it is down, resumes its watch and sees later changes; the node keeps its
// subnet.
func TestAgentSurvivesEtcdRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f := newEtcd(t)
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	startMaster(t, mctx, f)
	a, sa := testAgent(t, ctx, f, "a", netip.MustParseAddr("192.168.0.1"))
	a.run(ctx)
	defer a.close()
	sub := a.subnet
	for i := range 3 {
		o, _ := testAgent(t, ctx, f, fmt.Sprintf("o%d", i), netip.AddrFrom4([4]byte{192, 168, 0, byte(10 + i)}))
		o.run(ctx)
		defer o.close()
	}
	waitSink(t, sa, "3 remotes", func(s *countSink) bool { return len(s.remotes) == 3 })

	f.Stop()
	// Once the agent's connection has failed to come back, the agent is
	// cut off: its state must be unchanged.
	waitConn(t, ctx, a, connectivity.TransientFailure)
	sa.mu.Lock()
	if len(sa.remotes) != 3 {
		t.Errorf("remotes dropped while etcd was down: %v", sa.remotes)
	}
	sa.mu.Unlock()
	f.Restart()
	c := f.Client(t, pki.MasterUser)
	if _, err := registry.New(c).UpdateProjects(ctx, nil, func(v *master.VNIDs) error {
		_, err := v.Create("late")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitSink(t, sa, "change after the restart", func(s *countSink) bool { _, ok := s.projects["late"]; return ok && len(s.remotes) == 3 })
	s, err := registry.New(c).WaitSubnet(ctx, "a", 0)
	if err != nil || s.Subnet != sub {
		t.Errorf("subnet after restart %v (%v), want %v", s.Subnet, err, sub)
	}
}

// A node whose lease expired re-registers: it gets its subnet back while
// nobody took it; once another node holds it, the node withdraws it at once
// and moves to a fresh one, and never writes a claim on the taken subnet.
func TestAgentReregisterAfterLeaseExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newEtcd(t)
	reg := startMaster(t, ctx, f)
	c := reg.Client()
	a, sa := testAgent(t, ctx, f, "a", netip.MustParseAddr("192.168.0.1"))
	defer a.cli.Close()
	s0 := a.subnet

	// The lease expires (revoked here); nobody takes the subnet: a gets it
	// back and its dataplane is left alone.
	if _, err := c.Revoke(ctx, a.lease); err != nil {
		t.Fatal(err)
	}
	if err := a.reregister(ctx); err != nil {
		t.Fatal(err)
	}
	if a.subnet != s0 || len(sa.subnets) != 0 {
		t.Fatalf("after a free re-register: subnet %v (want %v), ChangeSubnet calls %v", a.subnet, s0, sa.subnets)
	}

	// Expired again, and b registers asking for exactly a's subnet.
	if _, err := c.Revoke(ctx, a.lease); err != nil {
		t.Fatal(err)
	}
	nb := f.Dial(t, f.AuthorizeNode(t, "b"))
	lb, err := nb.Client().Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if err := nb.Register(ctx, registry.Node{Name: "b", IP: netip.MustParseAddr("192.168.0.2"), Want: s0}, lb.ID); err != nil {
		t.Fatal(err)
	}
	sb, err := nb.WaitSubnet(ctx, "b", lb.ID)
	if err != nil || sb.Subnet != s0 {
		t.Fatalf("b did not take the free subnet %v: %v %v", s0, sb, err)
	}
	if err := a.reregister(ctx); err != nil {
		t.Fatal(err)
	}
	sa.mu.Lock()
	calls := slices.Clone(sa.subnets)
	sa.mu.Unlock()
	if len(calls) != 2 || calls[0].IsValid() || calls[1] != a.subnet || a.subnet == s0 || !a.subnet.IsValid() {
		t.Fatalf("ChangeSubnet calls %v, agent subnet %v: want withdraw, then a fresh subnet (not %v)", calls, a.subnet, s0)
	}
	subs, _, err := reg.Subnets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Prefix]string{}
	for _, s := range subs {
		if o, dup := seen[s.Subnet]; dup {
			t.Fatalf("%v held by %s and %s", s.Subnet, o, s.Node)
		}
		seen[s.Subnet] = s.Node
	}
	if seen[s0] != "b" || seen[a.subnet] != "a" {
		t.Errorf("registry subnets %v", seen)
	}
	r, err := c.Get(ctx, registry.ClaimKey(s0))
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "b" {
		t.Errorf("claim of %v: %v %v, want b", s0, r, err)
	}
}

// A failure to register again is logged at Warn when it is new, and at
// Debug while it repeats (etcd unreachable, once a second).
func TestLogRetry(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	last := ""
	for _, e := range []string{"context deadline exceeded", "context deadline exceeded", "subnet record and claim disagree", "subnet record and claim disagree"} {
		last = logRetry(log, last, errors.New(e))
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 2 || !strings.Contains(buf.String(), "claim disagree") {
		t.Errorf("%d warnings, want 2 (one per distinct error):\n%s", n, buf.String())
	}
}
