package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/sdn/node"
)

// ErrNoVNID is returned when a pod's project has no VNID: not in the
// static configuration, or not created by gvs-master within the wait
// (Config.VNIDWait). A pod is never attached with a VNID its project does
// not have: VNID 0 would make it global.
var ErrNoVNID = node.ErrNoVNID

// vnidWaiter makes sure a pod's project has a VNID before the pod is
// attached (pods.VNIDs): known to the rule program, or asked of the
// control plane and waited for a bounded time. Its methods are safe for
// concurrent use.
type vnidWaiter struct {
	prog  *node.Program
	limit time.Duration
	// labelsFirst makes a pod wait, in networkpolicy mode, until the
	// policy engine knows its labels (Kubernetes: every pod has an
	// object; in the etcd registry a pod without a labels record has
	// none, and its labels are applied whenever they are set).
	labelsFirst bool

	mu sync.Mutex
	// requester asks the control plane to create a project (nil without
	// one: a project is then known, comes by itself (follows) or never
	// will).
	requester func(ctx context.Context, project string) error
	// follows is set when the control plane gives every project a VNID
	// by itself (Kubernetes: gvs-master gives every Namespace a
	// NetNamespace): an unknown project is waited for, not asked for.
	follows bool
}

func (w *vnidWaiter) setRequester(fn func(context.Context, string) error) {
	w.mu.Lock()
	w.requester = fn
	w.mu.Unlock()
}

// setFollows says the control plane creates every project's VNID by itself
// (Kubernetes): Wait waits up to the limit for an unknown one to come.
func (w *vnidWaiter) setFollows() {
	w.mu.Lock()
	w.follows = true
	w.mu.Unlock()
}

// Wait returns when project has a VNID, asking the control plane to create
// the project if it is unknown (or, with a control plane that follows,
// waiting for it to come) until it is known, ctx ends or the limit passes. The error wraps ErrNoVNID and cniplugin.ErrTryAgain
// (CNI code 11: the runtime retries the pod later).
func (w *vnidWaiter) Wait(ctx context.Context, project, pod string) error {
	if err := w.waitVNID(ctx, project); err != nil {
		return err
	}
	return w.waitPod(ctx, project, pod)
}

// waitPod returns when, in networkpolicy mode, the pod project/pod is
// known to the policy engine (its labels and named ports came from the API
// server), or fails with ErrTryAgain once the limit passes: attaching a
// pod whose labels are unknown would leave it outside the policies that
// select it. Elsewhere, or for pod "" (adoption), it returns at once.
func (w *vnidWaiter) waitPod(ctx context.Context, project, pod string) error {
	if !w.prog.PolicyMode() || !w.labelsFirst {
		return nil
	}
	if pod == "" {
		return nil
	}
	if w.limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.limit)
		defer cancel()
	}
	for {
		ch := w.prog.ProjectsChanged()
		if w.prog.PolicyPodKnown(project, pod) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: pod %s/%s is not known from the API server yet (networkpolicy mode needs its labels before it is attached): %w",
				ErrNoVNID, project, pod, cniplugin.ErrTryAgain)
		}
	}
}

func (w *vnidWaiter) waitVNID(ctx context.Context, project string) error {
	if _, ok := w.prog.ProjectVNID(project); ok {
		return nil
	}
	w.mu.Lock()
	req, follows := w.requester, w.follows
	w.mu.Unlock()
	if req == nil && !follows {
		return fmt.Errorf("%w: project %q is not in the configuration's projects: %w", ErrNoVNID, project, cniplugin.ErrTryAgain)
	}
	if w.limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.limit)
		defer cancel()
	}
	late := "gvs-master did not create it in time (is project creation turned off? an administrator creates it with gvsctl projects create)"
	if req == nil {
		late = "it has no NetNamespace yet (gvs-master gives every Namespace one: is gvs-master running?)"
	} else if err := req(ctx, project); err != nil {
		return fmt.Errorf("%w: asking gvs-master to create project %q: %w (%w)", ErrNoVNID, project, err, cniplugin.ErrTryAgain)
	}
	for {
		ch := w.prog.ProjectsChanged()
		if _, ok := w.prog.ProjectVNID(project); ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: project %q: %s: %w", ErrNoVNID, project, late, cniplugin.ErrTryAgain)
		}
	}
}
