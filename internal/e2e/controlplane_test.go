package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// cpUp brings up a control-plane cluster and logs the master's (and etcd
// members') logs when the test fails.
func cpUp(t *testing.T, short, controlPlane string) *cluster.Cluster {
	t.Helper()
	c := up(t, short, cluster.Spec{
		Lab:          lab.Spec{Nodes: 3, PodsPerNode: 2, Projects: []string{"alpha", "beta"}},
		Mode:         "multitenant",
		VNIDs:        map[string]uint32{"alpha": 10, "beta": 11},
		ControlPlane: controlPlane,
		NodeLeaseTTL: 3,
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{"master.log", "etcd-m1.log", "etcd-m2.log", "etcd-m3.log"} {
				if b, err := os.ReadFile(filepath.Join(c.Lab.StateDir(), f)); err == nil {
					t.Logf("--- %s ---\n%s", f, b)
				}
			}
		}
	})
	return c
}

// leaseLosses counts the times node i's gvs-switchd logged that it lost its
// node lease (internal/daemon/etcdsource/follower.go, keepAlive).
func leaseLosses(t *testing.T, c *cluster.Cluster, i int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Lab.StateDir(), c.Nodes[i].Name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "node lease lost")
}

// remotes returns the remote nodes node i has rules for, from gvsctl show.
func remotes(t *testing.T, c *cluster.Cluster, i int) []string {
	out, err := c.Ctl(ctx(t), i, "show")
	if err != nil {
		return nil
	}
	var r []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[0] == "remote" {
			r = append(r, f[1]+"="+f[4])
		}
	}
	return r
}

// checkReach compares the reachability matrix with the registry's VNIDs,
// retrying while rules propagate.
func checkReach(t *testing.T, c *cluster.Cluster, what string) {
	t.Helper()
	if err := c.RefreshVNIDs(ctx(t)); err != nil {
		t.Fatal(err)
	}
	var mism []string
	ok := testutil.Eventually(10*time.Second, func() bool {
		mism = c.Reachability(ctx(t)).Mismatches()
		return len(mism) == 0
	})
	if !ok {
		t.Errorf("%s: reachability mismatches:\n%s", what, strings.Join(mism, "\n"))
	}
}

// TestControlPlaneEmbedded: gvs-master with its embedded etcd allocates the
// subnets in the rotation order, every node learns the others, `gvsctl
// projects join/isolate` changes isolation live, and a node gone past its
// lease is removed everywhere.
func TestControlPlaneEmbedded(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := cpUp(t, "cpe", cluster.ControlPlaneEmbedded)
	want := []string{"10.128.0.0/23", "10.129.0.0/23", "10.130.0.0/23"}
	for i, n := range c.Nodes {
		if n.Subnet.String() != want[i] {
			t.Errorf("%s subnet %v, want %s", n.Name, n.Subnet, want[i])
		}
		if !testutil.Eventually(10*time.Second, func() bool { return len(remotes(t, c, i)) == 2 }) {
			t.Errorf("%s knows remotes %v, want 2", n.Name, remotes(t, c, i))
		}
	}
	out, err := c.RegistryCtl(ctx(t), "nodes")
	t.Logf("gvsctl nodes:\n%s", out)
	if err != nil || strings.Count(string(out), "10.1") != 3 {
		t.Errorf("gvsctl nodes: %v", err)
	}
	checkReach(t, c, "initial")
	if _, err := c.Projects(ctx(t), "join", "alpha", "beta"); err != nil {
		t.Fatal(err)
	}
	checkReach(t, c, "after join alpha beta")
	if _, err := c.Projects(ctx(t), "isolate", "beta"); err != nil {
		t.Fatal(err)
	}
	checkReach(t, c, "after isolate beta")
	if _, err := c.Projects(ctx(t), "make-global", "alpha"); err != nil {
		t.Fatal(err)
	}
	checkReach(t, c, "after make-global alpha")
	if _, err := c.Projects(ctx(t), "isolate", "default"); err == nil {
		t.Error("isolate default was accepted")
	}

	// Node 3 stops: past its 3 s lease it is gone from the others.
	if err := c.StopNode(2); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if !testutil.Eventually(15*time.Second, func() bool { return len(remotes(t, c, i)) == 1 }) {
			t.Errorf("%s still has remotes %v after n3 left", c.Nodes[i].Name, remotes(t, c, i))
		}
	}
}

// TestControlPlaneExternalEtcd: a 3-member cluster of Debian's etcd. One
// member killed: changes still reach every node. All members stopped for
// longer than the node lease while pods ping each other: no packet lost;
// after etcd returns the nodes re-register with their subnets and a change
// reaches every node.
func TestControlPlaneExternalEtcd(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	if _, err := os.Stat(cluster.EtcdBinary); err != nil {
		t.Skip("etcd-server is not installed")
	}
	c := cpUp(t, "cpx", cluster.ControlPlaneExternal)
	for i := range c.Nodes {
		if !testutil.Eventually(10*time.Second, func() bool { return len(remotes(t, c, i)) == 2 }) {
			t.Fatalf("%s knows remotes %v, want 2", c.Nodes[i].Name, remotes(t, c, i))
		}
	}
	checkReach(t, c, "initial")

	t.Log("killing etcd member m1")
	if err := c.Etcd[0].Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Projects(ctx(t), "join", "alpha", "beta"); err != nil {
		t.Fatal(err)
	}
	checkReach(t, c, "after join with m1 down")
	if err := c.Etcd[0].Start(ctx(t)); err != nil {
		t.Fatal(err)
	}

	// Traffic across nodes while the whole etcd cluster is down.
	src, dst := c.Nodes[0].Pods[0], c.Nodes[1].Pods[1] // alpha on n1 → beta on n2 (joined)
	type result struct {
		out string
		err error
	}
	res := make(chan result, 1)
	pctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	txBefore := portTx(t, c, 1, dst)
	go func() {
		out, err := c.Lab.Exec(pctx, src.NS, "ping", "-c", "240", "-i", "0.05", "-W", "1", "-q", dst.IP.String())
		res <- result{string(out), err}
	}()
	// The outage starts once the ping's requests reach dst.
	if !testutil.Eventually(10*time.Second, func() bool { return portTx(t, c, 1, dst) >= txBefore+5 }) {
		t.Fatalf("the ping from %s does not reach %s", src.Name, dst.Name)
	}
	lost := make([]int, len(c.Nodes))
	for i := range c.Nodes {
		lost[i] = leaseLosses(t, c, i)
	}
	t.Log("stopping every etcd member")
	for _, m := range c.Etcd {
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	// The outage lasts until every node has lost its node lease (3 s).
	for i := range c.Nodes {
		if !testutil.Eventually(30*time.Second, func() bool { return leaseLosses(t, c, i) > lost[i] }) {
			t.Fatalf("%s did not lose its node lease with etcd down", c.Nodes[i].Name)
		}
	}
	t.Log("starting etcd again")
	for _, m := range c.Etcd {
		if err := m.Start(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	r := <-res
	t.Logf("ping during the outage:\n%s", r.out)
	if r.err != nil || !strings.Contains(r.out, " 0% packet loss") {
		t.Errorf("traffic lost while etcd was down: %v", r.err)
	}
	// Nodes re-register with the subnets they forward with.
	var out []byte
	ok := testutil.Eventually(20*time.Second, func() bool {
		var err error
		out, err = c.RegistryCtl(ctx(t), "nodes")
		if err != nil {
			return false
		}
		for _, n := range c.Nodes {
			if !strings.Contains(string(out), fmt.Sprintf("%s  ", n.Subnet)) && !strings.Contains(string(out), n.Subnet.String()+"\n") {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Errorf("nodes did not re-register with their subnets:\n%s", out)
	}
	if _, err := c.Projects(ctx(t), "isolate", "beta"); err != nil {
		t.Fatal(err)
	}
	checkReach(t, c, "after isolate beta once etcd returned")
	for i := range c.Nodes {
		if got := remotes(t, c, i); len(got) != 2 {
			t.Errorf("%s remotes after the outage: %v", c.Nodes[i].Name, got)
		}
	}
}
