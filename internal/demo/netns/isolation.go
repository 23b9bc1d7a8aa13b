package netns

import (
	"context"
	"fmt"
	"time"
)

// liveIsolation shows `gvsctl projects join` and `isolate` changing
// isolation on running nodes.
func (r *run) liveIsolation(ctx context.Context) {
	c := r.c
	res := &r.res.Isolation
	a, b := c.Nodes[0].Pods[1], c.Nodes[1].Pods[2] // alpha on n1, beta on n2
	reach := func() bool {
		_, err := c.Lab.Exec(ctx, a.NS, "ping", "-c", "1", "-W", "1", "-q", b.IP.String())
		return err == nil
	}
	// waitFor polls until reachability is want (rules follow etcd within
	// a fraction of a second) and says how long it took.
	waitFor := func(want bool) (time.Duration, bool) {
		start := time.Now()
		ok := eventually(ctx, 10*time.Second, 100*time.Millisecond, func() bool { return reach() == want })
		return time.Since(start), ok
	}
	show := func() {
		out, err := c.Projects(ctx, "list")
		if err != nil {
			r.fail(err.Error())
		}
		r.printf("%s", indent(string(out)))
	}
	r.step(fmt.Sprintf("isolation changing live: %s (%s, alpha) → %s (%s, beta)", a.Name, a.IP, b.Name, b.IP))
	show()
	if reach() {
		r.fail("alpha reached beta before the join")
	} else {
		res.BlockedBefore = true
		r.printf("    alpha → beta: blocked (different VNIDs)\n")
	}
	r.step("gvsctl projects join alpha beta")
	if _, err := c.Projects(ctx, "join", "alpha", "beta"); err != nil {
		r.fail(err.Error())
		return
	}
	show()
	if d, ok := waitFor(true); ok {
		res.Joined, res.JoinTook = true, d
		r.printf("    alpha → beta: reachable after %v (no daemon restarted)\n", d.Round(time.Millisecond))
	} else {
		r.fail("alpha did not reach beta after the join")
	}
	r.step("gvsctl projects isolate beta")
	if _, err := c.Projects(ctx, "isolate", "beta"); err != nil {
		r.fail(err.Error())
		return
	}
	show()
	if d, ok := waitFor(false); ok {
		res.Isolated, res.IsolateTook = true, d
		r.printf("    alpha → beta: blocked again after %v\n", d.Round(time.Millisecond))
	} else {
		r.fail("alpha still reached beta after isolating beta")
	}
	if err := c.RefreshVNIDs(ctx); err != nil {
		r.fail(err.Error())
	}
}
