package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/registry"
)

// TestProjectMulticast: a project's multicast opt-in is stored in its
// record and stays there when the project changes VNID (join, isolate);
// an unknown project is refused and nothing changes; a node's credentials
// cannot opt a project in.
func TestProjectMulticast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, reg := startEtcd(t)
	if err := reg.EnsureProjects(ctx, nil, "default", "a", "b"); err != nil {
		t.Fatal(err)
	}
	multicast := func() map[string]bool {
		t.Helper()
		recs, err := reg.ProjectRecords(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for name, p := range recs {
			if p.Multicast {
				out[name] = true
			}
		}
		return out
	}
	if err := reg.SetProjectMulticast(ctx, true, "a"); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetProjectMulticast(ctx, true, "b", "nope"); !errors.Is(err, registry.ErrNoProject) {
		t.Errorf("opting in an unknown project: %v, want ErrNoProject", err)
	}
	if got := multicast(); len(got) != 1 || !got["a"] {
		t.Fatalf("opted in: %v, want a only", got)
	}
	for _, fn := range []func(*master.VNIDs) error{
		func(v *master.VNIDs) error { return v.Join("b", "a") },
		func(v *master.VNIDs) error { return v.Isolate("a") },
	} {
		if _, err := reg.UpdateProjects(ctx, nil, fn); err != nil {
			t.Fatal(err)
		}
		if got := multicast(); len(got) != 1 || !got["a"] {
			t.Errorf("after a VNID change: opted in %v, want a only", got)
		}
	}
	if err := reg.SetProjectMulticast(ctx, false, "a"); err != nil {
		t.Fatal(err)
	}
	if got := multicast(); len(got) != 0 {
		t.Errorf("after opting out: %v", got)
	}
	if err := node(t, e, "n1").SetProjectMulticast(ctx, true, "b"); err == nil || !registry.IsRefused(err) {
		t.Errorf("a node opted a project in: %v", err)
	}
	if got := multicast(); len(got) != 0 {
		t.Errorf("after a node's attempt: %v", got)
	}
}
