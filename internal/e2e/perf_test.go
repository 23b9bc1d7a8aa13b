package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/bench/cluster"
	"github.com/gvswitch/gvs/bench/lab"
	"github.com/gvswitch/gvs/vxlan"
)

// TestPodGSOCap: with offloads on (the default), a pod's eth0 has
// gso_max_segs capped at what one UDP GSO send of vxlan0 carries for the
// pod MTU, and a 10 MB TCP transfer across nodes still arrives intact.
func TestPodGSOCap(t *testing.T) {
	c := up(t, "gs", cluster.Spec{
		Lab:  lab.Spec{Nodes: 2, PodsPerNode: 1, Projects: []string{"default"}},
		Mode: "subnet",
	})
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	out, err := c.Lab.Exec(ctx(t), a.NS, "ip", "-d", "link", "show", "eth0")
	if err != nil {
		t.Fatalf("ip link: %v\n%s", err, out)
	}
	// "... mtu 1450 ... gso_max_size 65536 gso_max_segs 44 ..."
	attr := map[string]string{}
	fields := strings.Fields(string(out))
	for i := 0; i+1 < len(fields); i++ {
		if _, seen := attr[fields[i]]; !seen {
			attr[fields[i]] = fields[i+1]
		}
	}
	mtu, err := strconv.Atoi(attr["mtu"])
	if err != nil {
		t.Fatalf("no MTU in:\n%s", out)
	}
	if want := vxlan.GSOSegments(mtu); want == 0 || attr["gso_max_segs"] != strconv.Itoa(want) {
		t.Errorf("eth0 (MTU %d): gso_max_segs %q, want %d\n%s", mtu, attr["gso_max_segs"], want, out)
	}
	if res := tcpTransfer(t, c.Lab, a, b.NS, b.IP.String(), 10<<20); !strings.Contains(res, "intact=true") {
		t.Errorf("TCP across nodes: %s", res)
	}
}
