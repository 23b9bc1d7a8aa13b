// Package importcheck holds the tests that keep the dataplane core free of
// Prometheus, CNI, etcd and netlink imports, and the ports free of the
// switch.
package importcheck

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// core is the dataplane: what an embedder links to switch frames.
var core = []string{"packet", "port", "port/busypoll", "tap", "tap/uring", "vxlan", "flowtable", "vswitch", "conntrack"}

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
			if dep == "github.com/gvswitch/gvs/vswitch" || dep == "github.com/gvswitch/gvs/flowtable" {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}

// layer ranks the product packages (paths under the module): a package
// imports only packages of its own layer or a lower one. From the bottom:
// leaves that know nothing of gvs's other parts; the frame, rule and API
// types; the ports and the switch; the OpenShift rule program and the CNI
// plug-in's library; the control plane's pieces; what assembles them; the
// daemon's sources, then the daemon; the commands and the image. A new
// package is added here (or to harness or experiments) or the test fails.
var layer = map[string]int{
	"packet": 0, "conntrack": 0, "port/busypoll": 0, "sdn/projectname": 0, "sdn/pki": 0, "sdn/nat": 0,
	"internal/accept": 0, "internal/handoff": 0, "internal/ociimage": 0, "internal/pcap": 0, "internal/sched": 0, "internal/flagargs": 0,
	"port": 1, "netconf": 1, "flowtable": 1, "sdn/kube/networkv1": 1, "ipfix": 1,
	"tap": 2, "tap/uring": 2, "vxlan": 2, "vswitch": 2, "internal/control": 2,
	"sdn": 3, "cniplugin": 3,
	"sdn/master": 4, "sdn/gateway": 4, "sdn/netpol": 4,
	"sdn/node": 5, "sdn/kube": 5, "sdn/why": 5, "sdn/registry": 5, "sdn/registry/embedded": 5,
	"internal/daemon/source": 6, "console": 6,
	"internal/daemon/etcdsource": 7, "internal/daemon/kubesource": 7, "internal/daemon/pods": 7,
	"internal/daemon": 8,
	"cmd/gvs-switchd": 9, "cmd/gvs-master": 9, "cmd/gvs-cni": 9, "cmd/gvsctl": 9, "deploy": 9, "deploy/image": 9,
}

// harness is the lab, the benchmarks and the tests' helpers (prefixes):
// they may import any product package; no product package imports them
// outside its tests.
var harness = []string{"lab", "bench/", "conntrack/ctdiff", "internal/e2e", "internal/kubetest", "internal/nstest",
	"internal/etcdtest", "internal/testutil", "internal/netpolref", "internal/demo/", "internal/docscheck",
	"internal/importcheck", "cmd/gvs-bench", "cmd/gvs-demo"}

// experiments is the folder of prototypes that are not part of gvs.
const experiments = "experiments/"

const module = "github.com/gvswitch/gvs/"

func inHarness(p string) bool {
	for _, h := range harness {
		if p == h || strings.HasPrefix(p, strings.TrimSuffix(h, "/")+"/") {
			return true
		}
	}
	return false
}

// TestLayers checks every package's imports against layer, harness and
// experiments.
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		name := strings.TrimPrefix(p.ImportPath, module)
		own := func(deps []string) (r []string) {
			for _, d := range deps {
				if strings.HasPrefix(d, module) {
					r = append(r, strings.TrimPrefix(d, module))
				}
			}
			return r
		}
		imports, tests := own(p.Imports), own(append(p.TestImports, p.XTestImports...))
		if strings.HasPrefix(name, experiments) {
			continue
		}
		for _, d := range append(slices.Clone(imports), tests...) {
			if strings.HasPrefix(d, experiments) {
				t.Errorf("%s imports %s: nothing outside %s may", name, d, experiments)
			}
		}
		if inHarness(name) {
			continue
		}
		rank, ok := layer[name]
		if !ok {
			t.Errorf("%s is in no layer: add it to layer, harness or experiments in this test", name)
			continue
		}
		for _, d := range imports {
			switch r, ok := layer[d]; {
			case inHarness(d):
				t.Errorf("%s imports %s: a product package must not import the harness (only its tests may)", name, d)
			case ok && r > rank:
				t.Errorf("%s (layer %d) imports %s (layer %d): upward", name, rank, d, r)
			}
		}
	}
	if seen < len(layer) {
		t.Errorf("go list gave %d packages, fewer than the %d in layer", seen, len(layer))
	}
}
