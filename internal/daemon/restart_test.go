package daemon

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/gvswitch/gvs/cniplugin"
)

// A DEL whose namespace file outlived its namespace (unmounted, not
// removed: a runtime that crashed in its teardown) has no TAP to remove and
// must succeed, not fail on entering a namespace that is not there.
func TestRemoveLeftoverTAPNamespaceGone(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cni-1234")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"", filepath.Join(dir, "missing"), file, dir} {
		l := cniplugin.Lease{ContainerID: "c1", IfName: "eth0", IP: netip.MustParseAddr("10.128.0.2"), Netns: ns}
		if err := removeLeftoverTAP(l); err != nil {
			t.Errorf("netns %q: %v", ns, err)
		}
	}
	if !isNetns("/proc/self/ns/net") {
		t.Error("/proc/self/ns/net is not recognized as a network namespace")
	}
}
