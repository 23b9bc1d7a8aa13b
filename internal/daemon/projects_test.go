package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gvswitch/gvs/cniplugin"
)

// A pod's project must have a VNID: without a control plane an unknown
// project is refused at once; with one, the node asks for it and waits,
// and gives up (CNI code 11) when nobody creates it. Never VNID 0.
func TestProjectsWaitFailsClosed(t *testing.T) {
	p := newProjects(map[string]uint32{"alpha": 10}, true)
	ctx := context.Background()
	if v, err := p.wait(ctx, "alpha"); err != nil || v != 10 {
		t.Fatalf("alpha: %d %v", v, err)
	}
	if v, err := p.wait(ctx, "default"); err != nil || v != 0 {
		t.Fatalf("default: %d %v", v, err)
	}
	_, err := p.wait(ctx, "beta")
	if !errors.Is(err, ErrNoVNID) || !errors.Is(err, cniplugin.ErrTryAgain) {
		t.Fatalf("unknown project without a control plane: %v, want ErrNoVNID and ErrTryAgain", err)
	}

	var asked atomic.Int32
	p.setRequester(func(_ context.Context, project string) error {
		asked.Add(1)
		if project == "gamma" {
			go p.set("gamma", 42) // gvs-master creates it
		}
		return nil
	})
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if v, err := p.wait(wctx, "gamma"); err != nil || v != 42 {
		t.Fatalf("gamma: %d %v, want 42", v, err)
	}
	sctx, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	_, err = p.wait(sctx, "delta")
	if !errors.Is(err, ErrNoVNID) || !errors.Is(err, cniplugin.ErrTryAgain) {
		t.Fatalf("project nobody creates: %v, want ErrNoVNID and ErrTryAgain", err)
	}
	if _, ok := p.get("delta"); ok {
		t.Error("delta got a VNID")
	}
	if asked.Load() != 2 {
		t.Errorf("asked %d times, want 2 (gamma, delta)", asked.Load())
	}
	p.setRequester(func(context.Context, string) error { return errors.New("etcd unreachable") })
	if _, err := p.wait(ctx, "epsilon"); !errors.Is(err, cniplugin.ErrTryAgain) {
		t.Errorf("request failing: %v, want ErrTryAgain", err)
	}
}
