package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/sdn/master"
)

// ErrNoVNID is returned when a pod's project has no VNID: not in the
// static configuration, or not created by gvs-master within the wait
// (Config.VNIDWait). A pod is never attached with a VNID its project does
// not have: VNID 0 would make it global.
var ErrNoVNID = errors.New("the pod's project has no VNID")

// projects is the node's project → VNID map, filled by the registry
// follower (SetProjectVNID) or from the static configuration, and waited on
// by pod attachment. Its methods are safe for concurrent use.
type projects struct {
	mu      sync.Mutex
	vnids   map[string]uint32
	changed chan struct{} // closed and replaced at every change
	// requester asks the control plane to create a project (nil without
	// one: a project is then known or never will be).
	requester func(ctx context.Context, project string) error
}

// newProjects starts the map with the configuration's projects; with
// implicitDefault (no control plane), project default is VNID 0 unless
// listed, as gvs-master makes it.
func newProjects(static map[string]uint32, implicitDefault bool) *projects {
	p := &projects{vnids: map[string]uint32{}, changed: make(chan struct{})}
	if implicitDefault {
		p.vnids[master.DefaultProject] = master.GlobalVNID
	}
	for name, v := range static {
		p.vnids[name] = v
	}
	return p
}

func (p *projects) setRequester(fn func(context.Context, string) error) {
	p.mu.Lock()
	p.requester = fn
	p.mu.Unlock()
}

// set records a project's VNID and wakes the waiters.
func (p *projects) set(name string, vnid uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.vnids[name]; ok && old == vnid {
		return
	}
	p.vnids[name] = vnid
	close(p.changed)
	p.changed = make(chan struct{})
}

// get returns a project's VNID.
func (p *projects) get(name string) (uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.vnids[name]
	return v, ok
}

// wait returns project's VNID, asking the control plane to create the
// project if it is unknown and waiting until it is known or ctx ends. The
// error wraps ErrNoVNID and cniplugin.ErrTryAgain (CNI code 11: the
// runtime retries the pod later).
func (p *projects) wait(ctx context.Context, project string) (uint32, error) {
	p.mu.Lock()
	v, ok := p.vnids[project]
	req := p.requester
	p.mu.Unlock()
	if ok {
		return v, nil
	}
	if req == nil {
		return 0, fmt.Errorf("%w: project %q is not in the configuration's projects: %w", ErrNoVNID, project, cniplugin.ErrTryAgain)
	}
	if err := req(ctx, project); err != nil {
		return 0, fmt.Errorf("%w: asking gvs-master to create project %q: %w (%w)", ErrNoVNID, project, err, cniplugin.ErrTryAgain)
	}
	for {
		p.mu.Lock()
		v, ok := p.vnids[project]
		ch := p.changed
		p.mu.Unlock()
		if ok {
			return v, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: project %q: gvs-master did not create it in time (is project creation turned off? an administrator creates it with gvsctl projects create): %w",
				ErrNoVNID, project, cniplugin.ErrTryAgain)
		}
	}
}
