package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn"
)

// churnTables are the tables a pod's rules live in and traffic between two
// pods on different nodes crosses: a drop counted there during the churn
// would be a frame lost to an update.
var churnTables = []int{sdn.TableVXLANIn, sdn.TablePodIn, sdn.TableFromHost, sdn.TableARPLocal,
	sdn.TableIPLocal, sdn.TableIsolation, sdn.TableIPRemote, sdn.TableARPRemote}

var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// TestChurnNoLoss: pod 0 of node 0 pings pod 0 of node 1 every 2 ms
// while the test adds and removes a third pod's rules 1 000 times on each
// node through the daemons' control sockets (add-flows of sdn.PodRules,
// del-flows by the pod's cookie: one table update each, as for a CNI ADD or
// DEL). Every echo request must be answered, and no drop may be counted in
// the tables the pods' rules live in. The switch-level test with 100 k
// rules and sequence-checked frames is switch.TestChurnNoLoss.
func TestChurnNoLoss(t *testing.T) {
	c := up(t, "ch", cluster.Spec{
		Lab:  lab.Spec{Nodes: 2, PodsPerNode: 1, Projects: []string{"default"}},
		Mode: "subnet",
	})
	a, b := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	if ok, out := ping(t, c.Lab, a.NS, b.IP, 56); !ok {
		t.Fatalf("no connectivity before the churn:\n%s", out)
	}
	before := [2]control.Stats{churnStats(t, c, 0), churnStats(t, c, 1)}

	// 4 000 requests at 2 ms: at least 8 s, longer than the paced updates
	// take (about 4 s).
	const count = 4000
	type result struct {
		out []byte
		err error
	}
	pinged := make(chan result, 1)
	pingStart := time.Now()
	go func() {
		out, err := c.Lab.Exec(ctx(t), a.NS, "ping", "-n", "-q", "-i", "0.002", "-c", strconv.Itoa(count), "-W", "2", b.IP.String())
		pinged <- result{out, err}
	}()
	time.Sleep(300 * time.Millisecond) // pacing: let ping start before the churn

	// The churned pod: an unused address high in each node's subnet, port 200.
	const updates = 1000
	type churnNode struct {
		socket, add, del string
	}
	var nodes []churnNode
	for _, n := range c.Nodes {
		ip := n.Subnet.Addr()
		for range 200 {
			ip = ip.Next()
		}
		pod := sdn.Pod{Name: "churn", IP: ip, Port: 200}
		rules, err := sdn.PodRules(sdn.NodeConfig{Mode: sdn.ModeSubnet}, pod)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, churnNode{
			socket: n.Socket,
			add:    strings.Join(sdn.Text(rules), "\n"),
			del:    sdn.PodFilter(ip),
		})
	}
	var lat []time.Duration
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Updates are paced (3 ms apart) so that they spread over the ping
	// instead of finishing in its first half second.
	for k := range updates {
		for _, n := range nodes {
			req := control.Request{Command: "add-flows", Args: n.add}
			if k%2 == 1 {
				req = control.Request{Command: "del-flows", Args: n.del}
			}
			var res control.CountResult
			t0 := time.Now()
			if err := control.Call(cctx, n.socket, req, &res); err != nil {
				t.Fatalf("update %d (%s on %s): %v", k, req.Command, n.socket, err)
			}
			lat = append(lat, time.Since(t0))
			if res.Count != 5 {
				t.Fatalf("update %d: %s on %s: %d rules, want 5", k, req.Command, n.socket, res.Count)
			}
		}
		time.Sleep(3 * time.Millisecond) // pacing: the rate of rule updates
	}
	churned := time.Since(pingStart)

	r := <-pinged
	pingTook := time.Since(pingStart)
	m := pingSummary.FindSubmatch(r.out)
	if m == nil {
		t.Fatalf("ping: %v\n%s", r.err, r.out)
	}
	sent, got := string(m[1]), string(m[2])
	if sent != got || sent != strconv.Itoa(count) {
		t.Errorf("ping under churn: %s requests sent, %s replies (%v)\n%s", sent, got, r.err, r.out)
	}
	if churned >= pingTook {
		t.Errorf("the updates (%v) outlasted the ping (%v): part of the churn ran without traffic", churned, pingTook)
	}
	for i := range c.Nodes {
		after := churnStats(t, c, i)
		for _, tb := range churnTables {
			if d := after.TableDrops[tb] - before[i].TableDrops[tb]; d != 0 {
				t.Errorf("%s: %d drops in table %d during the churn", c.Nodes[i].Name, d, tb)
			}
		}
	}
	slices.Sort(lat)
	t.Logf("%d updates on each of %d nodes in %v while %s pings were answered in %v; control round trip per update: median %v, max %v",
		updates, len(nodes), churned.Round(time.Millisecond), got, pingTook.Round(time.Millisecond),
		lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
}

func churnStats(t *testing.T, c *cluster.Cluster, i int) control.Stats {
	t.Helper()
	var st control.Stats
	if err := control.Call(ctx(t), c.Nodes[i].Socket, control.Request{Command: "stats"}, &st); err != nil {
		t.Fatal(fmt.Errorf("stats of %s: %w", c.Nodes[i].Name, err))
	}
	return st
}
