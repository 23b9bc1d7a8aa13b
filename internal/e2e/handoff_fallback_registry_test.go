package e2e

import (
	"strings"
	"testing"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestHandoffFallbackRegistry is TestHandoffFallback with the etcd
// registry: the successor has registered (and got the node's subnet)
// before the handoff is refused, and starts afresh with the configuration
// it ran with (daemon.Daemon.Config), asking for the same subnet, so the
// node keeps it and its pods stay attached.
func TestHandoffFallbackRegistry(t *testing.T) {
	c := up(t, "hfbr", cluster.Spec{Lab: lab.Spec{Nodes: 2, PodsPerNode: 1}, Mode: "subnet", CNI: true,
		ControlPlane: cluster.ControlPlaneEmbedded})
	lb := upgradeFallsBack(t, c)
	if !strings.Contains(string(lb), "live upgrade failed; starting afresh") {
		t.Error("the log has no fallback")
	}
	for _, moved := range []string{"NODE SUBNET", "went to another node"} {
		if strings.Contains(string(lb), moved) {
			t.Errorf("the node's subnet changed in the fallback: the log has %q", moved)
		}
	}
	// Every daemon the node ran (the first, the one that fell back and
	// started afresh) was ready on the same subnet.
	subnets := map[string]bool{}
	ready := 0
	for _, l := range strings.Split(string(lb), "\n") {
		if !strings.Contains(l, "gvs-switchd ready") {
			continue
		}
		ready++
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, "subnet="); ok {
				subnets[v] = true
			}
		}
	}
	if ready < 2 || len(subnets) != 1 {
		t.Errorf("%d daemons ready on subnets %v, want 2 or more on one", ready, subnets)
	}
}
