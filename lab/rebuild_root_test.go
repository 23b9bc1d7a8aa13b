package lab

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A rebuilt node's namespace is a new one under the same name: what was in
// the old one (a link, a route) is gone, eth0 has the node's address
// again, and the node reaches the other node over the underlay.
func TestRebuildNode(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := testPrefix(t, "r")
	t.Cleanup(func() { _ = DestroyPrefix(prefix) })
	l, err := Create(ctx, Spec{Prefix: prefix, Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	n1, n2 := l.Nodes[0], l.Nodes[1]
	if out, err := l.Exec(ctx, n2.NS, "ip", "link", "add", "left", "type", "veth", "peer", "name", "right"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := l.RebuildNode(ctx, n2.Name); err != nil {
		t.Fatal(err)
	}
	out, err := l.Exec(ctx, n2.NS, "ip", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(string(out), n2.IP.String()+"/") {
		t.Fatalf("eth0 after the rebuild: %v: %s", err, out)
	}
	if out, err := l.Exec(ctx, n2.NS, "ip", "link", "show", "left"); err == nil {
		t.Errorf("the old namespace's link is still there: %s", out)
	}
	for _, c := range []struct{ from, to Node }{{n1, n2}, {n2, n1}} {
		if r, err := Ping(ctx, l, c.from.NS, c.to.IP, 100, 2); err != nil || r.Loss == 1 {
			t.Errorf("%s → %s after the rebuild: %v (loss %v)", c.from.Name, c.to.Name, err, r.Loss)
		}
	}
	if err := l.RebuildNode(ctx, "n9"); err == nil {
		t.Error("RebuildNode of a node the lab does not have succeeded")
	}
}
