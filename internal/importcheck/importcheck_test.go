// Package importcheck holds a test that keeps the dataplane core free of
// Prometheus, CNI, etcd and netlink imports.
package importcheck

import (
	"os/exec"
	"strings"
	"testing"
)

var core = []string{"packet", "tap", "vxlan", "flowtable", "switch", "conntrack"}

var forbidden = []string{
	"github.com/prometheus/",
	"github.com/containernetworking/",
	"go.etcd.io/",
	"github.com/vishvananda/",
	"github.com/google/nftables",
}

func TestCoreImports(t *testing.T) {
	for _, pkg := range core {
		out, err := exec.Command("go", "list", "-deps", "github.com/gvswitch/gvs/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s depends on %s; the dataplane core must not", pkg, dep)
				}
			}
		}
	}
}
