package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
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
	checkGSOCap(t, c, a)
	if res := tcpTransfer(t, c.Lab, a, b.NS, b.IP.String(), 10<<20); !strings.Contains(res, "intact=true") {
		t.Errorf("TCP across nodes: %s", res)
	}
}

// checkGSOCap checks that pod p's eth0 has gso_max_segs at the cap.
func checkGSOCap(t *testing.T, c *cluster.Cluster, p cluster.Pod) {
	t.Helper()
	out, err := c.Lab.Exec(ctx(t), p.NS, "ip", "-d", "link", "show", "eth0")
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
		t.Errorf("%s eth0 (MTU %d): gso_max_segs %q, want %d\n%s", p.Name, mtu, attr["gso_max_segs"], want, out)
	}
}

// TestAdoptedPodGetsGSOCap: a CNI pod whose eth0 lost the cap (created
// before it existed, or while offloads were off) gets it when a restarted
// gvs-switchd adopts its TAP.
func TestAdoptedPodGetsGSOCap(t *testing.T) {
	c := up(t, "ga", cluster.Spec{
		Lab:  lab.Spec{Nodes: 1, PodsPerNode: 1, Projects: []string{"default"}},
		Mode: "subnet",
		CNI:  true,
	})
	p := c.Nodes[0].Pods[0]
	checkGSOCap(t, c, p)
	if err := c.StopDaemon(0); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Lab.Exec(ctx(t), p.NS, "ip", "link", "set", "eth0", "gso_max_segs", "65535"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if err := c.StartDaemon(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	checkGSOCap(t, c, p)
}
