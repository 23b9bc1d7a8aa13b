package e2e

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/demo/cluster"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/lab"
)

// TestRealNodesDemo runs make demo MODE=cluster's steps on a prefix of its own,
// checks the printed matrices (all admitted; then the NetworkPolicy in beta
// refuses alpha), and that Down leaves no namespace, mount, cgroup, process
// or directory behind.
func TestRealNodesDemo(t *testing.T) {
	needRoot(t)
	if m := kubetest.MissingForNodes(kubetest.BinDir()); len(m) > 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("missing (make kube-tools image kube-images): %v", m)
		}
		t.Skipf("missing (make kube-tools image kube-images): %v", m)
	}
	prefix := "gvsdemo-t"
	t.Cleanup(func() { _ = cluster.Down(prefix) })
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var out bytes.Buffer
	d, err := cluster.Up(ctx, cluster.Config{Prefix: prefix, Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	before, after, err := d.Show(ctx)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Pods) != 4 {
		t.Fatalf("%d demo pods, want 4", len(before.Pods))
	}
	for i, src := range after.Pods {
		for j, dst := range after.Pods {
			if i == j {
				continue
			}
			if !before.OK[i][j] {
				t.Errorf("without a policy %s -> %s refused", src.Label(), dst.Label())
			}
			want := !(dst.Project == "beta" && src.Project != "beta")
			if after.OK[i][j] != want {
				t.Errorf("with the policy %s -> %s: reached %v, want %v", src.Label(), dst.Label(), after.OK[i][j], want)
			}
		}
	}
	if !strings.Contains(out.String(), "ip netns exec "+d.Cluster.Server.NS) {
		t.Errorf("the printed kubectl commands do not run in the API server's namespace")
	}

	var pids []int
	cgs, _ := filepath.Glob("/sys/fs/cgroup/pids/gvslab-" + prefix + "-*")
	for _, cg := range cgs { // the processes sit in sub-cgroups (kubepods, …)
		_ = filepath.WalkDir(cg, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	if len(pids) == 0 {
		t.Errorf("no processes found in the nodes' cgroups")
	}
	if err := cluster.Down(prefix); err != nil {
		t.Fatalf("Down: %v", err)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			if b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status")); !strings.Contains(string(b), "State:\tZ") {
				t.Errorf("process %d still runs after Down", pid)
			}
		}
	}
	ents, _ := os.ReadDir(lab.NetnsDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			t.Errorf("namespace %s left", e.Name())
		}
	}
	for _, p := range []string{filepath.Join(kubetest.NodeRoot, prefix), filepath.Join(lab.StateRoot, prefix)} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left", p)
		}
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/gvslab-" + prefix + "-*"); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	if m, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(m, []byte(prefix)) {
		t.Errorf("mounts of %s left", prefix)
	}
}
