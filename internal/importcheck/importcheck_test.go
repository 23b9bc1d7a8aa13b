// Package importcheck holds the tests that keep the dataplane core free of
// Prometheus, CNI, etcd and netlink imports, and the ports free of the
// switch.
package importcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// The I/O engine prototypes (issue 14) are held to the same rule: they
// will sit under the switch once integrated.
var core = []string{"packet", "port", "busypoll", "tap", "vxlan", "flowtable", "switch", "conntrack", "tap/uring", "tap/vhost", "afxdp"}

var forbidden = []string{
	"github.com/prometheus/",
	"github.com/containernetworking/",
	"go.etcd.io/",
	"github.com/vishvananda/",
	"github.com/google/nftables",
}

// deps lists the packages pkg (under the module) depends on.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "github.com/gvswitch/gvs/"+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

func TestCoreImports(t *testing.T) {
	for _, pkg := range core {
		for _, dep := range deps(t, pkg) {
			for _, f := range forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s depends on %s; the dataplane core must not", pkg, dep)
				}
			}
		}
	}
}

// TestPortsWithoutSwitch: the ports implement vswitch.Port through the
// types of package port alone, so that they, and an embedder's ports, are
// usable without the switch and its flow table.
func TestPortsWithoutSwitch(t *testing.T) {
	for _, pkg := range []string{"port", "tap", "vxlan"} {
		for _, dep := range deps(t, pkg) {
			if dep == "github.com/gvswitch/gvs/switch" || dep == "github.com/gvswitch/gvs/flowtable" {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
