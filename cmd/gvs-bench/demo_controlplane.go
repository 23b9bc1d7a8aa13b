package main

import (
	"context"
	"fmt"
	"time"

	"github.com/gvswitch/gvs/lab/cluster"
)

// demoLiveIsolation shows `gvsctl projects join` and `isolate` changing
// isolation on running nodes, and returns what went wrong.
func demoLiveIsolation(ctx context.Context, c *cluster.Cluster, step func(string)) []string {
	var bad []string
	a, b := c.Nodes[0].Pods[1], c.Nodes[1].Pods[2] // alpha on n1, beta on n2
	reach := func() bool {
		_, err := c.Lab.Exec(ctx, a.NS, "ping", "-c", "1", "-W", "1", "-q", b.IP.String())
		return err == nil
	}
	// waitFor polls until reachability is want (rules follow etcd within
	// a fraction of a second).
	waitFor := func(want bool) (time.Duration, bool) {
		start := time.Now()
		for time.Since(start) < 10*time.Second {
			if reach() == want {
				return time.Since(start), true
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(start), false
	}
	show := func() {
		out, err := c.Projects(ctx, "list")
		if err != nil {
			bad = append(bad, err.Error())
		}
		fmt.Print(indent(string(out)))
	}
	step(fmt.Sprintf("isolation changing live: %s (%s, alpha) → %s (%s, beta)", a.Name, a.IP, b.Name, b.IP))
	show()
	if reach() {
		bad = append(bad, "alpha reached beta before the join")
	} else {
		fmt.Println("    alpha → beta: blocked (different VNIDs)")
	}
	step("gvsctl projects join alpha beta")
	if _, err := c.Projects(ctx, "join", "alpha", "beta"); err != nil {
		return append(bad, err.Error())
	}
	show()
	if d, ok := waitFor(true); ok {
		fmt.Printf("    alpha → beta: reachable after %v (no daemon restarted)\n", d.Round(time.Millisecond))
	} else {
		bad = append(bad, "alpha did not reach beta after the join")
	}
	step("gvsctl projects isolate beta")
	if _, err := c.Projects(ctx, "isolate", "beta"); err != nil {
		return append(bad, err.Error())
	}
	show()
	if d, ok := waitFor(false); ok {
		fmt.Printf("    alpha → beta: blocked again after %v\n", d.Round(time.Millisecond))
	} else {
		bad = append(bad, "alpha still reached beta after isolating beta")
	}
	if err := c.RefreshVNIDs(ctx); err != nil {
		bad = append(bad, err.Error())
	}
	return bad
}
