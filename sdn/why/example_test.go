package why_test

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/sdn/why"
)

// ExampleAsk asks why a pod of project p1 on node a can or cannot reach
// two pods on node b. In a cluster the Tracer is a why.Remote (the nodes'
// trace endpoints); here it is two nodes' real rule programs in memory
// (helpers_test.go), traced as gvs-switchd traces them.
func ExampleAsk() {
	ctx := context.Background()
	cluster, err := buildLabCluster(sdn.ModeMultitenant, nil)
	if err != nil {
		panic(err)
	}
	pods, err := why.ListPods(ctx, cluster, []string{"a", "b"})
	if err != nil {
		panic(err)
	}
	client, _ := why.Find(pods, "p1/client")
	target, _ := why.ParseTarget("tcp/8080")
	for _, to := range []string{"p1/server", "p2/server"} {
		server, _ := why.Find(pods, to)
		a, err := why.Ask(ctx, cluster, why.Question{From: client, To: server, Target: target})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s → %s %s: %s\n", client, server, target, a.Reason)
		st, _ := a.DecidingStep()
		fmt.Printf("  decided on node %s, table %d, priority %d\n", st.Node, st.Table, st.Priority)
	}
	// Output:
	// p1/client → p1/server tcp/8080: allowed: table 80 on node b outputs it to p1/server (port 3), through the tunnel from node a
	//   decided on node b, table 80, priority 100
	// p1/client → p2/server tcp/8080: VNID 10 may not reach VNID 11 (table 80, node b)
	//   decided on node b, table 80, priority 0
}

// ExampleRemote is how gvs-master (or any program with an administrator's
// or gvs-master's certificate) asks a running cluster in the etcd-registry
// mode: its identity from its PKI files, the nodes from the registry, the
// pods from the nodes. (Not run: it needs a cluster.)
func ExampleRemote() {
	ctx := context.Background()
	id, err := pki.Dir("/var/lib/gvs-master/pki").Files(pki.MasterUser).ClientConfig()
	if err != nil {
		panic(err)
	}
	etcd, err := registry.Dial(registry.DialConfig{Endpoints: []string{"https://127.0.0.1:2379"},
		TLS: pki.Dir("/var/lib/gvs-master/pki").Files(pki.MasterUser)})
	if err != nil {
		panic(err)
	}
	defer etcd.Close()
	nodes, err := registry.New(etcd).Nodes(ctx)
	if err != nil {
		panic(err)
	}
	r := &why.Remote{TLS: id, Nodes: why.NodesOf(nodes, why.DefaultPort)}
	pods, err := why.ListPods(ctx, r, slices.Sorted(maps.Keys(r.Nodes)))
	if err != nil {
		panic(err)
	}
	m, err := why.Matrix(ctx, r, pods, why.Target{Proto: "tcp", Port: 8080})
	if err != nil {
		panic(err)
	}
	for i, row := range m.Answers {
		for j, a := range row {
			if i != j && !a.Allowed {
				fmt.Printf("%s ✗ %s: %s\n", m.Pods[i], m.Pods[j], a.Reason)
			}
		}
	}
}

// ExampleMatrix prints which pods reach which on UDP port 53.
func ExampleMatrix() {
	ctx := context.Background()
	cluster, err := buildLabCluster(sdn.ModeMultitenant, nil)
	if err != nil {
		panic(err)
	}
	pods, err := why.ListPods(ctx, cluster, []string{"a", "b"})
	if err != nil {
		panic(err)
	}
	m, err := why.Matrix(ctx, cluster, pods, why.Target{Proto: "udp", Port: 53})
	if err != nil {
		panic(err)
	}
	fmt.Print(m)
	// Output:
	// udp/53 (row reaches column: . yes, X no, ? unknown)
	//   0 p1/client                       - . . X X
	//   1 p1/locked                       . - . X X
	//   2 p1/server                       . . - X X
	//   3 p2/other                        X X X - .
	//   4 p2/server                       X X X . -
}
