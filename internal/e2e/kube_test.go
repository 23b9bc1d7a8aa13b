package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
)

// TestKubeMasterBinary runs the gvs-master binary in Kubernetes mode (as
// the gvs-master ServiceAccount) and drives it with gvsctl --kubeconfig,
// both in the API server's namespace: projects create, join, make-global,
// isolate, a refused join, nodes, and a restart of gvs-master that keeps
// every VNID.
func TestKubeMasterBinary(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	needRoot(t)
	s := kubetest.New(t, "bin")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sa, err := s.ServiceAccountConfig(ctx, "gvs", "gvs-master")
	if err != nil {
		t.Fatal(err)
	}
	kcfg := filepath.Join(s.Dir, "gvs-master.kubeconfig")
	if err := s.WriteKubeconfig(kcfg, sa); err != nil {
		t.Fatal(err)
	}
	argv := []string{filepath.Join(binDir, "gvs-master"), "--kubeconfig", kcfg, "--mode", "multitenant",
		"--cluster-network", "10.1.0.0/16:6", "--lease-namespace", "gvs", "--identity", "e2e"}
	logFile := filepath.Join(s.Dir, "gvs-master.log")
	startMaster := func() *lab.Proc {
		p, err := s.Lab.Start(ctx, s.NS, logFile, argv...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	master := startMaster()
	t.Cleanup(func() {
		_ = master.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("--- gvs-master log ---\n%s", b)
		}
	})
	gvsctl := func(args ...string) (map[string]uint32, error) {
		out, err := s.Lab.Exec(ctx, s.NS, append([]string{filepath.Join(binDir, "gvsctl"), "--kubeconfig", s.Kubeconfig, "-o", "json", "--timeout", "20s", "projects"}, args...)...)
		if err != nil {
			return nil, err
		}
		m := map[string]uint32{}
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("gvsctl projects %v: %v\n%s", args, err, out)
		}
		return m, nil
	}
	must := func(args ...string) map[string]uint32 {
		t.Helper()
		m, err := gvsctl(args...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	p := must("create", "alpha", "beta")
	alpha, beta := p["alpha"], p["beta"]
	if p["default"] != 0 || alpha < 10 || beta < 10 || alpha == beta {
		t.Fatalf("after create: %v", p)
	}
	if p = must("join", "alpha", "beta"); p["beta"] != alpha {
		t.Fatalf("join alpha beta: %v", p)
	}
	if p = must("make-global", "beta"); p["beta"] != 0 {
		t.Fatalf("make-global beta: %v", p)
	}
	if p = must("isolate", "beta"); p["beta"] < 10 || p["beta"] == alpha {
		t.Fatalf("isolate beta: %v", p)
	}
	if _, err := gvsctl("join", "nosuch", "alpha"); err == nil {
		t.Fatal("joining a project that does not exist succeeded")
	}
	before := must("list")
	if before["alpha"] != alpha {
		t.Fatalf("the refused join moved alpha: %v", before)
	}

	// Restart: every VNID stays; the new master serves new namespaces.
	if err := master.Stop(); err != nil {
		t.Fatal(err)
	}
	master = startMaster()
	after := must("create", "gamma")
	for n, v := range before {
		if after[n] != v {
			t.Errorf("after a restart %s has VNID %d, had %d", n, after[n], v)
		}
	}
	if after["gamma"] < 10 {
		t.Errorf("gamma: VNID %d", after["gamma"])
	}

	kc, err := kubernetes.NewForConfig(s.Admin())
	if err != nil {
		t.Fatal(err)
	}
	n, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.50.1"}}
	if _, err := kc.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	type row struct{ Name, IP, Subnet string }
	ok := testutil.Eventually(10*time.Second, func() bool {
		out, err := s.Lab.Exec(ctx, s.NS, filepath.Join(binDir, "gvsctl"), "--kubeconfig", s.Kubeconfig, "-o", "json", "nodes")
		var rows []row
		return err == nil && json.Unmarshal(out, &rows) == nil && len(rows) == 1 &&
			rows[0] == row{"node1", "192.168.50.1", "10.1.0.0/26"}
	})
	if !ok {
		t.Fatal("gvsctl nodes does not show node1 192.168.50.1 10.1.0.0/26")
	}
}
