package pods

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/nstest"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/node"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// gate is a Switch whose AddPortQueues for one port waits until released:
// an attachment stopped half-way.
type gate struct {
	*vswitch.Switch
	port    uint32
	reached chan struct{}
	release chan struct{}
}

func (g *gate) AddPortQueues(no uint32, qs []vswitch.Port) error {
	if no == g.port {
		close(g.reached)
		<-g.release
	}
	return g.Switch.AddPortQueues(no, qs)
}

type known struct{}

func (known) Wait(context.Context, string, string) error { return nil }

// Attachments of different pods run in parallel: while one is stopped
// half-way (its TAP made, its switch port not yet added), another one
// completes. Then both detach, leaving no port and no rule.
func TestAddInParallel(t *testing.T) {
	nstest.RequireRoot(t)
	slowNS, fastNS := nstest.New(t, "pods", "slow"), nstest.New(t, "pods", "fast")
	table := flowtable.New(flowtable.Config{})
	sw, err := vswitch.New(vswitch.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	n := sdn.NodeConfig{NodeName: "n1", NodeIP: netip.MustParseAddr("192.168.0.1"),
		Subnet:          netip.MustParsePrefix("10.128.0.0/23"),
		ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")},
		ServiceNetwork:  netip.MustParsePrefix("172.30.0.0/16"), Mode: sdn.ModeMultitenant, MTU: 1450}
	prog, err := node.New(node.Config{Table: table, Node: n, Projects: map[string]uint32{"alpha": 10}})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{Switch: sw, port: 3, reached: make(chan struct{}), release: make(chan struct{})}
	m := New(Config{Switch: g, Program: prog, VNIDs: known{}, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	slow := make(chan error, 1)
	go func() {
		_, err := m.Add(ctx, Spec{Name: "slow", Project: "alpha", Netns: slowNS, IP: netip.MustParseAddr("10.128.0.2"), Port: 3}, nil)
		slow <- err
	}()
	select {
	case <-g.reached:
	case err := <-slow:
		t.Fatalf("the slow pod finished before its switch port: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the slow pod never reached its switch port")
	}
	fast := make(chan error, 1)
	go func() {
		_, err := m.Add(ctx, Spec{Name: "fast", Project: "alpha", Netns: fastNS, IP: netip.MustParseAddr("10.128.0.3"), Port: 4}, nil)
		fast <- err
	}()
	select {
	case err := <-fast:
		if err != nil {
			t.Fatalf("fast pod: %v", err)
		}
	case <-time.After(20 * time.Second):
		close(g.release)
		t.Fatal("the second pod waited for the first: attachments run one at a time")
	}
	// The same key or port while the slow one is in flight is refused.
	if _, err := m.Add(ctx, Spec{Name: "slow", Project: "alpha", Netns: slowNS, IP: netip.MustParseAddr("10.128.0.9"), Port: 9}, nil); !errors.Is(err, ErrAttached) {
		t.Errorf("a second attachment of an attaching pod: %v, want ErrAttached", err)
	}
	if _, err := m.Add(ctx, Spec{Name: "other", Project: "alpha", Netns: fastNS, IP: netip.MustParseAddr("10.128.0.9"), Port: 3}, nil); !errors.Is(err, ErrPortTaken) {
		t.Errorf("an attachment on a reserved port: %v, want ErrPortTaken", err)
	}
	close(g.release)
	if err := <-slow; err != nil {
		t.Fatalf("slow pod: %v", err)
	}
	if got := m.List(); len(got) != 2 || got[0].Name != "slow" || got[1].Name != "fast" || got[0].VNID != 10 {
		t.Fatalf("pods %+v", got)
	}
	for _, key := range []string{"slow", "fast"} {
		if err := m.Delete(key); err != nil {
			t.Fatal(err)
		}
	}
	if m.Len() != 0 || len(sw.Ports()) != 0 {
		t.Errorf("after DEL: %d pods, %d ports", m.Len(), len(sw.Ports()))
	}
	for _, ip := range []string{"10.128.0.2", "10.128.0.3"} {
		if got, _ := prog.PodRules(netip.MustParseAddr(ip)); got != 0 {
			t.Errorf("pod %s: %d rules left", ip, got)
		}
	}
}
