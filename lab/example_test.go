package lab_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gvswitch/gvs/lab"
)

// ExampleCreate builds two nodes with two pods each and an external host,
// pings across the underlay, runs a process in a node, and tears it all
// down. It needs root, so it is compiled but not run by go test.
func ExampleCreate() {
	ctx := context.Background()
	l, err := lab.Create(ctx, lab.Spec{
		Prefix:      "gvs-example",
		Nodes:       2,
		PodsPerNode: 2,
		Projects:    []string{"default", "alpha"},
		External:    true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Destroy()

	n1, n2 := l.Nodes[0], l.Nodes[1]
	r, err := lab.Ping(ctx, l, n1.NS, n2.IP, 1000, 5)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s -> %s: loss %.0f%%, avg %v, p99 %v\n", n1.Name, n2.Name, r.Loss*100, r.Avg, r.P99)

	for _, p := range l.Pods() {
		fmt.Println(p.Name, p.Project, p.NSPath)
	}

	srv, err := l.Start(ctx, l.External.NS, "", "sleep", "30")
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()

	out, err := l.Exec(ctx, n1.NS, "ip", "-br", "addr")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(out))
}
