// Command gvs-demo runs the demo on real Kubernetes nodes (make demo
// MODE=cluster): gvs-demo up brings it up and leaves it running, gvs-demo
// down removes it. The logic is in internal/demo/cluster.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gvswitch/gvs/internal/demo/cluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gvs-demo:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: gvs-demo up|down")
	}
	switch args[0] {
	case "up":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		d, err := cluster.Up(ctx, cluster.Config{Out: os.Stdout})
		if err != nil {
			return err
		}
		_, _, err = d.Show(ctx)
		return err
	case "down":
		if err := cluster.Down(cluster.Prefix); err != nil {
			return err
		}
		fmt.Println("cluster demo removed:", cluster.Prefix)
		return nil
	}
	return fmt.Errorf("unknown subcommand %q (up or down)", args[0])
}
