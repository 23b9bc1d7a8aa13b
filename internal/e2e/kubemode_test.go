package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestKubeMode: gvs-master and two gvs-switchd follow a real API server
// (cluster.ControlPlaneKube: Namespaces are projects, Nodes get
// HostSubnets; the daemons read with gvs-node's ServiceAccount). The
// reachability matrix follows the NetNamespaces' VNIDs on every node;
// `gvsctl --kubeconfig projects join`, `make-global` and `isolate`, which
// write the annotation `oc adm pod-network` writes, re-tag the running
// pods; with the API server stopped for a minute forwarding is unchanged,
// and a change made after it returns arrives.
func TestKubeMode(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	kubetest.Require(t)
	c := up(t, "km", cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}},
		Mode:         "multitenant",
		ControlPlane: cluster.ControlPlaneKube,
		// Pods attached by CNI with the plugin and configuration each
		// daemon installed (cniBinDir, cniConfDir: the DaemonSet's way).
		CNI: true,
	})
	alpha1, beta2 := c.Nodes[0].Pods[1], c.Nodes[1].Pods[2]
	if alpha1.VNID == 0 || beta2.VNID == 0 || alpha1.VNID == beta2.VNID {
		t.Fatalf("VNIDs from the NetNamespaces: alpha %d, beta %d", alpha1.VNID, beta2.VNID)
	}
	checkReach(t, c, "initial")
	// Each daemon follows its own node's Pods: gvsctl pods shows their
	// labels (the cluster made the Pod objects, cluster.PodLabels).
	want, err := json.Marshal(cluster.PodLabels(alpha1, c.Nodes[0].Name))
	if err != nil {
		t.Fatal(err)
	}
	var pods []byte
	if !testutil.Eventually(20*time.Second, func() bool {
		pods, _ = c.Ctl(ctx(t), 0, "pods")
		return bytes.Contains(pods, []byte(`"labels":`+string(want)))
	}) {
		t.Errorf("gvsctl pods on n1 never showed %s's labels %s:\n%s", alpha1.Name, want, pods)
	}
	if other := cluster.PodLabels(beta2, c.Nodes[1].Name)["app"]; bytes.Contains(pods, []byte(`"app":"`+other+`"`)) {
		t.Errorf("n1 shows the labels of n2's pod %s:\n%s", other, pods)
	}
	project := func(args ...string) {
		t.Helper()
		if out, err := c.KubeCtl(ctx(t), append([]string{"projects"}, args...)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	reaches := func() bool {
		_, err := c.Lab.Exec(ctx(t), alpha1.NS, "ping", "-c", "1", "-W", "1", "-q", beta2.IP.String())
		return err == nil
	}
	project("join", "alpha", "beta")
	checkReach(t, c, "beta joined to alpha")
	if !reaches() {
		t.Error("alpha does not reach beta across nodes after the join")
	}
	project("isolate", "beta")
	checkReach(t, c, "beta isolated")
	project("make-global", "beta")
	checkReach(t, c, "beta global")
	project("isolate", "beta")
	checkReach(t, c, "beta isolated again")
	if reaches() {
		t.Fatal("alpha reaches beta after isolate")
	}

	// The API server goes away for a minute: forwarding goes on.
	if err := c.Kube.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	alpha2 := c.Nodes[1].Pods[1]
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if ok, out := ping(t, c.Lab, alpha1.NS, alpha2.IP, 56); !ok {
			t.Fatalf("alpha → alpha across nodes failed while the API server was down:\n%s", out)
		}
		time.Sleep(5 * time.Second) // pacing: a ping every 5 s while the API server is down
	}
	if reaches() {
		t.Error("isolation lost while the API server was down")
	}
	kctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Kube.StartAPIServer(kctx); err != nil {
		t.Fatal(err)
	}
	// A change made after it returns arrives on every node, once their
	// informers are back: client-go's reflectors back off up to 30 s with
	// as much jitter again (a minute's outage reaches that), and a
	// restarted API server refuses watches until its RBAC caches fill.
	project("join", "alpha", "beta")
	start := time.Now()
	// Each node's informers come back on their own schedule: wait for
	// both, n2 (alpha on n1 reaches beta on n2) and n1 (beta on n1 reaches
	// alpha on n2).
	beta1 := c.Nodes[0].Pods[2]
	bothNodes := func() bool {
		if !reaches() {
			return false
		}
		_, err := c.Lab.Exec(ctx(t), beta1.NS, "ping", "-c", "1", "-W", "1", "-q", alpha2.IP.String())
		return err == nil
	}
	if !testutil.Eventually(150*time.Second, bothNodes) {
		t.Fatal("the join made after the outage did not arrive on both nodes within 150 s")
	}
	t.Logf("the join made after the outage arrived in %v", time.Since(start).Round(time.Second))
	checkReach(t, c, "beta joined after the outage")
	for i := range c.Nodes {
		out := ctl(t, c, i, "dump-flows", "table=80")
		if !strings.Contains(out, "reg0=") {
			t.Errorf("node %d has no VNID rules:\n%s", i, out)
		}
	}
}
