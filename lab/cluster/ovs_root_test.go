package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gvswitch/gvs/lab"
)

// TestOVSCluster brings up two nodes on Open vSwitch's userspace datapath
// and pings across them, both ways.
func TestOVSCluster(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	if err := OVSAvailable(); err != nil {
		t.Skip(err)
	}
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "github.com/gvswitch/gvs/cmd/gvs-switchd", "github.com/gvswitch/gvs/cmd/gvsctl").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Up(ctx, Spec{
		Lab:        lab.Spec{Prefix: fmt.Sprintf("gvcovs%d", os.Getpid()%100000), PodsPerNode: 1, Underlay: netip.MustParsePrefix("192.168.243.0/24")},
		Mode:       "subnet",
		BinDir:     bin,
		Dataplanes: []string{DataplaneOVS, DataplaneOVS},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	if len(c.DataplanePIDs(0)) != 1 {
		t.Errorf("DataplanePIDs(0) = %v, want one ovs-vswitchd", c.DataplanePIDs(0))
	}
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	for _, d := range [][2]Pod{{a, b}, {b, a}} {
		r, err := lab.Ping(ctx, c.Lab, d[0].NS, d[1].IP, 0, 5)
		if err != nil {
			out, _ := c.vsctl(ctx, 0, "show")
			t.Fatalf("ping %s -> %s: %v (%+v)\n%s", d[0].Name, d[1].IP, err, r, out)
		}
	}
}
