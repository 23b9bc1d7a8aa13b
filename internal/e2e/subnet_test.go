package e2e

import (
	"strings"
	"testing"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestSubnetMode: in the flat mode every pod reaches every pod, whatever
// its project.
func TestSubnetMode(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := up(t, "sn", cluster.Spec{
		Lab:   lab.Spec{Nodes: 2, PodsPerNode: 2, Projects: []string{"alpha", "beta"}},
		Mode:  "subnet",
		VNIDs: map[string]uint32{"alpha": 10, "beta": 11},
	})
	m := c.Reachability(ctx(t))
	var b strings.Builder
	m.Print(&b)
	t.Logf("reachability:\n%s", b.String())
	for _, s := range m.Mismatches() {
		t.Error(s)
	}
	for i := range m.Got {
		for j := range m.Got[i] {
			if !m.Got[i][j] {
				t.Errorf("subnet mode: pod %d cannot reach pod %d", i+1, j+1)
			}
		}
	}
}

// TestKernelInterop: a gvs node and a node made of a Linux bridge and the
// kernel's vxlan device (VNI 0) carry ping and TCP between their pods.
func TestKernelInterop(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := up(t, "kv", cluster.Spec{
		Lab:        lab.Spec{Nodes: 2, PodsPerNode: 1, Projects: []string{"default"}},
		Mode:       "subnet",
		Dataplanes: []string{cluster.DataplaneGVS, cluster.DataplaneKernel},
	})
	g, k := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	for _, size := range []int{56, 1400, 3000} {
		if ok, out := ping(t, c.Lab, g.NS, k.IP, size); !ok {
			t.Errorf("gvs pod → kernel pod, ping -s %d:\n%s", size, out)
		}
		if ok, out := ping(t, c.Lab, k.NS, g.IP, size); !ok {
			t.Errorf("kernel pod → gvs pod, ping -s %d:\n%s", size, out)
		}
	}
	if res := tcpTransfer(t, c.Lab, g, k.NS, k.IP.String(), 10<<20); !strings.Contains(res, "intact=true") {
		t.Errorf("TCP gvs → kernel: %s", res)
	}
	if res := tcpTransfer(t, c.Lab, k, g.NS, g.IP.String(), 10<<20); !strings.Contains(res, "intact=true") {
		t.Errorf("TCP kernel → gvs: %s", res)
	}
}
