package etcdsource

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/gvswitch/gvs/sdn/registry"
)

// flakySink fails its first ChangeSubnet calls, as a rule update that did
// not apply would.
type flakySink struct {
	countSink
	failures int
}

func (s *flakySink) ChangeSubnet(p netip.Prefix) error {
	s.mu.Lock()
	fail := s.failures > 0
	s.failures--
	s.mu.Unlock()
	if err := s.countSink.ChangeSubnet(p); err != nil || !fail {
		return err
	}
	return errors.New("rules did not apply")
}

// TestResubnetRetries: a node that lost its subnet must not go on serving
// it because one reconfiguration failed; resubnet retries until the move
// succeeds.
func TestResubnetRetries(t *testing.T) {
	s := &flakySink{countSink: countSink{remotes: map[netip.Addr]bool{}, projects: map[string]uint32{}}, failures: 2}
	a := newAgent(nil, registry.Node{Name: "n1"}, 5, s, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	old, fresh := netip.MustParsePrefix("10.128.0.0/23"), netip.MustParsePrefix("10.128.2.0/23")
	a.resubnet(ctx, old, fresh)
	if len(s.subnets) != 3 || s.subnets[2] != fresh {
		t.Fatalf("ChangeSubnet calls %v, want 3 attempts at %v", s.subnets, fresh)
	}
	if a.subnet != fresh {
		t.Errorf("agent subnet %v, want %v", a.subnet, fresh)
	}

	// A context that ends stops the retries; the registry's subnet is
	// still recorded.
	s.failures = 1 << 30
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	a.resubnet(ctx2, fresh, netip.Prefix{})
	if a.subnet.IsValid() {
		t.Errorf("agent subnet %v after a withdrawal, want none", a.subnet)
	}
}
