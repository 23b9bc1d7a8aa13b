package node_test

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/node"
)

func testNode() sdn.NodeConfig {
	return sdn.NodeConfig{NodeName: "n1", NodeIP: netip.MustParseAddr("192.168.0.1"),
		Subnet:          netip.MustParsePrefix("10.128.0.0/23"),
		ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")},
		ServiceNetwork:  netip.MustParsePrefix("172.30.0.0/16"), Mode: sdn.ModeMultitenant, MTU: 1450}
}

type peerSet struct {
	mu  sync.Mutex
	ips map[netip.Addr]bool
}

func (p *peerSet) Add(ip netip.Addr) error { p.mu.Lock(); p.ips[ip] = true; p.mu.Unlock(); return nil }
func (p *peerSet) Remove(ip netip.Addr)    { p.mu.Lock(); delete(p.ips, ip); p.mu.Unlock() }

// count counts the table's rules with cookie c.
func count(t *flowtable.Table, c uint64) int {
	n := 0
	for _, r := range t.Rules() {
		if r.Cookie == c {
			n++
		}
	}
	return n
}

func newProgram(t *testing.T, projects map[string]uint32) (*node.Program, *flowtable.Table, *peerSet) {
	t.Helper()
	table := flowtable.New(flowtable.Config{})
	peers := &peerSet{ips: map[netip.Addr]bool{}}
	p, err := node.New(node.Config{Table: table, Node: testNode(), Peers: peers, Projects: projects})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(); err != nil {
		t.Fatal(err)
	}
	return p, table, peers
}

// sameRules fails unless table holds exactly the rules of want.
func sameRules(t *testing.T, what string, table *flowtable.Table, want []*flowtable.Rule) {
	t.Helper()
	have := table.Rules()
	if len(have) != len(want) {
		t.Fatalf("%s: %d rules, want %d", what, len(have), len(want))
	}
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.Equal(w) {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("%s: missing %s", what, w)
		}
	}
}

// The program equals sdn.Program's for the same pods and nodes, however
// the incremental changes built it.
func TestIncrementalEqualsWhole(t *testing.T) {
	p, table, peers := newProgram(t, map[string]uint32{"default": 0, "alpha": 10, "beta": 11})
	pods := []sdn.Pod{
		{Name: "a", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.2"), Port: 3},
		{Name: "b", Namespace: "beta", IP: netip.MustParseAddr("10.128.0.3"), Port: 4},
		{Name: "c", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.4"), Port: 5},
		{Name: "d", Namespace: "default", IP: netip.MustParseAddr("10.128.0.5"), Port: 6},
	}
	remote := sdn.RemoteNode{Name: "n2", IP: netip.MustParseAddr("192.168.0.2"), Subnet: netip.MustParsePrefix("10.129.0.0/23")}
	if err := p.AddRemote(remote); err != nil {
		t.Fatal(err)
	}
	var want []sdn.Pod
	for _, pod := range pods {
		got, err := p.AddPod(pod)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, got)
	}
	if want[0].VNID != 10 || want[1].VNID != 11 || want[3].VNID != 0 {
		t.Fatalf("VNIDs %+v", want)
	}
	whole, err := sdn.Program(testNode(), want, []sdn.RemoteNode{remote})
	if err != nil {
		t.Fatal(err)
	}
	sameRules(t, "after the adds", table, whole)
	if !peers.ips[remote.IP] {
		t.Error("the remote node's VXLAN is not accepted")
	}
	// beta joins alpha's VNID: b moves, VNID 11's rules go.
	moved, err := p.SetProjectVNID("beta", 10)
	if err != nil || len(moved) != 1 || moved[0].Name != "b" || moved[0].VNID != 11 {
		t.Fatalf("re-tag: %v %v", moved, err)
	}
	if n := count(table, sdn.VNIDCookie(11)); n != 0 {
		t.Errorf("VNID 11 has %d rules after its last pod moved", n)
	}
	want[1].VNID = 10
	whole, _ = sdn.Program(testNode(), want, []sdn.RemoteNode{remote})
	sameRules(t, "after the re-tag", table, whole)
	// VNID 10's rules stay until its last pod goes.
	for _, ip := range []string{"10.128.0.2", "10.128.0.4"} {
		if err := p.RemovePod(netip.MustParseAddr(ip)); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(table, sdn.VNIDCookie(10)); n == 0 {
		t.Error("VNID 10's rules went while pod b still has it")
	}
	if err := p.RemovePod(netip.MustParseAddr("10.128.0.3")); err != nil {
		t.Fatal(err)
	}
	if n := count(table, sdn.VNIDCookie(10)); n != 0 {
		t.Errorf("VNID 10 has %d rules after its last pod", n)
	}
	if err := p.RemoveRemote(remote.IP); err != nil || peers.ips[remote.IP] || count(table, sdn.NodeCookie(remote.IP)) != 0 {
		t.Errorf("remote removal: %v, peer %v", err, peers.ips[remote.IP])
	}
}

// Fail closed: a pod of a project with no VNID gets no rules (project
// default included, when the control plane did not create it); a pod
// outside the subnet, on a reserved address or on one taken, neither.
func TestAddPodRefusals(t *testing.T) {
	p, table, _ := newProgram(t, map[string]uint32{"alpha": 10})
	before := table.Len()
	for _, c := range []struct {
		pod  sdn.Pod
		want error
	}{
		{sdn.Pod{Name: "x", Namespace: "unknown", IP: netip.MustParseAddr("10.128.0.2"), Port: 3}, node.ErrNoVNID},
		{sdn.Pod{Name: "x", Namespace: "default", IP: netip.MustParseAddr("10.128.0.2"), Port: 3}, node.ErrNoVNID},
		{sdn.Pod{Name: "x", Namespace: "alpha", IP: netip.MustParseAddr("10.130.0.2"), Port: 3}, sdn.ErrInvalidConfig},
		{sdn.Pod{Name: "x", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.1"), Port: 3}, sdn.ErrInvalidConfig},
	} {
		if _, err := p.AddPod(c.pod); !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c.pod, err, c.want)
		}
	}
	if table.Len() != before {
		t.Errorf("refused pods left %d rules", table.Len()-before)
	}
	ok := sdn.Pod{Name: "a", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.2"), Port: 3}
	if got, err := p.AddPod(ok); err != nil || got.VNID != 10 {
		t.Fatalf("alpha pod: %+v %v", got, err)
	}
	if _, err := p.AddPod(ok); err == nil {
		t.Error("a second pod on the same address was accepted")
	}
}

// A subnet change withdraws every pod and VNID rule, the old setup rules
// and remote nodes overlapping the new subnet, and installs the new setup
// rules, in one update; rules added by hand stay.
func TestChangeSubnet(t *testing.T) {
	p, table, peers := newProgram(t, map[string]uint32{"alpha": 10})
	if _, err := p.AddPod(sdn.Pod{Name: "a", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.2"), Port: 3}); err != nil {
		t.Fatal(err)
	}
	stale := sdn.RemoteNode{Name: "old", IP: netip.MustParseAddr("192.168.0.9"), Subnet: netip.MustParsePrefix("10.129.0.0/23")}
	if err := p.AddRemote(stale); err != nil {
		t.Fatal(err)
	}
	hand, err := flowtable.ParseRule("table=99, priority=7, ip, nw_dst=8.8.8.8, actions=drop")
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Add(hand); err != nil {
		t.Fatal(err)
	}
	w, err := p.ChangeSubnet(netip.MustParsePrefix("10.129.0.0/23"))
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Pods) != 1 || len(w.Remotes) != 1 || w.Old.Subnet.String() != "10.128.0.0/23" {
		t.Fatalf("withdrawal %+v", w)
	}
	nn := testNode()
	nn.Subnet = netip.MustParsePrefix("10.129.0.0/23")
	setup, err := sdn.SetupRules(nn)
	if err != nil {
		t.Fatal(err)
	}
	sameRules(t, "after the change", table, append(setup, hand))
	if peers.ips[stale.IP] {
		t.Error("the overlapping remote node's VXLAN is still accepted")
	}
	if p.Node().Subnet != nn.Subnet {
		t.Errorf("node subnet %v", p.Node().Subnet)
	}
	// An invalid subnet: the node has none, only the hand-made rule stays.
	if _, err := p.ChangeSubnet(netip.Prefix{}); err != nil {
		t.Fatal(err)
	}
	sameRules(t, "without a subnet", table, []*flowtable.Rule{hand})
}

// Concurrent pod adds, removes and re-tags leave the table equal to the
// program of the pods that remain.
func TestConcurrent(t *testing.T) {
	p, table, _ := newProgram(t, map[string]uint32{"alpha": 10, "beta": 11})
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			ip := netip.AddrFrom4([4]byte{10, 128, 0, byte(10 + i)})
			ns := []string{"alpha", "beta"}[i%2]
			if _, err := p.AddPod(sdn.Pod{Name: ip.String(), Namespace: ns, IP: ip, Port: uint32(10 + i)}); err != nil {
				t.Error(err)
			}
			if i%3 == 0 {
				if err := p.RemovePod(ip); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Go(func() {
		for v := range uint32(20) {
			if _, err := p.SetProjectVNID("beta", 11+v%2*100); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	var remaining []sdn.Pod
	for i := range 40 {
		if pod, ok := p.Pod(netip.AddrFrom4([4]byte{10, 128, 0, byte(10 + i)})); ok {
			remaining = append(remaining, pod)
		}
	}
	whole, err := sdn.Program(testNode(), remaining, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameRules(t, "after the concurrent changes", table, whole)
}
