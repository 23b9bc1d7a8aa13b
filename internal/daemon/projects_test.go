package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/netpol"
	"github.com/gvswitch/gvs/sdn/node"
)

// A pod's project must have a VNID: without a control plane an unknown
// project is refused at once; with one, the node asks for it and waits,
// and gives up (CNI code 11) when nobody creates it. Never VNID 0.
func TestProjectsWaitFailsClosed(t *testing.T) {
	prog, err := node.New(node.Config{Table: flowtable.New(flowtable.Config{}), Node: sdn.NodeConfig{Mode: sdn.ModeMultitenant},
		Projects: map[string]uint32{"alpha": 10}, ImplicitDefault: true})
	if err != nil {
		t.Fatal(err)
	}
	p := &vnidWaiter{prog: prog}
	vnid := func(project string) (uint32, bool) { return prog.ProjectVNID(project) }
	ctx := context.Background()
	for project, want := range map[string]uint32{"alpha": 10, "default": 0} {
		if err := p.Wait(ctx, project, ""); err != nil {
			t.Fatalf("%s: %v", project, err)
		}
		if v, ok := vnid(project); !ok || v != want {
			t.Fatalf("%s: VNID %d %v, want %d", project, v, ok, want)
		}
	}
	err = p.Wait(ctx, "beta", "")
	if !errors.Is(err, ErrNoVNID) || !errors.Is(err, cniplugin.ErrTryAgain) {
		t.Fatalf("unknown project without a control plane: %v, want ErrNoVNID and ErrTryAgain", err)
	}

	var asked atomic.Int32
	p.setRequester(func(_ context.Context, project string) error {
		asked.Add(1)
		if project == "gamma" {
			go prog.SetProjectVNID("gamma", 42) // gvs-master creates it
		}
		return nil
	})
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.Wait(wctx, "gamma", ""); err != nil {
		t.Fatalf("gamma: %v", err)
	}
	if v, _ := vnid("gamma"); v != 42 {
		t.Fatalf("gamma: VNID %d, want 42", v)
	}
	sctx, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	err = p.Wait(sctx, "delta", "")
	if !errors.Is(err, ErrNoVNID) || !errors.Is(err, cniplugin.ErrTryAgain) {
		t.Fatalf("project nobody creates: %v, want ErrNoVNID and ErrTryAgain", err)
	}
	if _, ok := vnid("delta"); ok {
		t.Error("delta got a VNID")
	}
	if asked.Load() != 2 {
		t.Errorf("asked %d times, want 2 (gamma, delta)", asked.Load())
	}
	p.setRequester(func(context.Context, string) error { return errors.New("etcd unreachable") })
	if err := p.Wait(ctx, "epsilon", ""); !errors.Is(err, cniplugin.ErrTryAgain) {
		t.Errorf("request failing: %v, want ErrTryAgain", err)
	}
}

// In networkpolicy mode with Kubernetes a pod is attached only once the
// policy engine knows it (its labels from the API server): until then the
// attachment waits, and past the limit fails with CNI code 11. A pod being
// adopted after a restart (no name) does not wait, nor does any in the
// etcd registry (a pod without a labels record has no labels).
func TestPodWaitsForItsLabels(t *testing.T) {
	prog, err := node.New(node.Config{Table: flowtable.New(flowtable.Config{}), Node: sdn.NodeConfig{Mode: sdn.ModeNetworkPolicy},
		Projects: map[string]uint32{"alpha": 10}})
	if err != nil {
		t.Fatal(err)
	}
	reg := &vnidWaiter{prog: prog, limit: 300 * time.Millisecond}
	reg.setRequester(func(context.Context, string) error { return nil })
	ctx := context.Background()
	if err := reg.Wait(ctx, "alpha", "web"); err != nil {
		t.Fatalf("a pod without labels in the registry mode: %v", err)
	}
	w := &vnidWaiter{prog: prog, limit: 300 * time.Millisecond, labelsFirst: true}
	w.setRequester(func(context.Context, string) error { return nil })
	if err := w.Wait(ctx, "alpha", "web"); !errors.Is(err, cniplugin.ErrTryAgain) {
		t.Fatalf("an unknown pod: %v, want ErrTryAgain", err)
	}
	if err := w.Wait(ctx, "alpha", ""); err != nil {
		t.Fatalf("adoption waited: %v", err)
	}
	w.limit = 10 * time.Second
	done := make(chan error, 1)
	go func() { done <- w.Wait(ctx, "alpha", "web") }()
	time.Sleep(100 * time.Millisecond) // so that Wait is waiting when the labels come (no hook says it is; it passes either way)
	if err := prog.SetPolicyPod(netpol.Pod{Namespace: "alpha", Name: "web", Labels: map[string]string{"app": "web"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the attachment did not wake when the pod became known")
	}
}
