// Command gvs-demo runs gvs's demos (make demo): gvs-demo up brings one up
// and leaves it running, gvs-demo down removes both kinds.
//
//	gvs-demo up [-mode etcd|kube|netpol|cluster] [-prefix P]
//	gvs-demo down [-prefix P]
//
// The modes etcd (the default), kube and netpol run the demo on
// network-namespace nodes (internal/demo/netns); cluster runs it on real
// Kubernetes nodes (internal/demo/cluster).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gvswitch/gvs/internal/demo/cluster"
	"github.com/gvswitch/gvs/internal/demo/netns"
)

const usage = `usage: gvs-demo up [-mode etcd|kube|netpol|cluster] [-prefix P]
       gvs-demo down [-prefix P]`

// ModeCluster is the mode of the demo on real Kubernetes nodes.
const ModeCluster = "cluster"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gvs-demo:", err)
		os.Exit(1)
	}
}

// command is a parsed command line.
type command struct {
	// Verb is "up" or "down".
	Verb string
	// Mode is one of netns.Modes or ModeCluster (up only).
	Mode string
	// Prefix is the lab prefix; "" is each demo's default.
	Prefix string
}

// parse reads the command line; flag errors and usage go to stderr.
func parse(args []string, stderr io.Writer) (command, error) {
	if len(args) == 0 {
		return command{}, errors.New(usage)
	}
	cmd := command{Verb: args[0]}
	fs := flag.NewFlagSet("gvs-demo "+cmd.Verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cmd.Prefix, "prefix", "", fmt.Sprintf("lab prefix of the namespaces (default %s, %s for -mode cluster; down: both)", netns.Prefix, cluster.Prefix))
	switch cmd.Verb {
	case "up":
		fs.StringVar(&cmd.Mode, "mode", netns.ModeEtcd, "etcd (gvs-master's embedded registry), kube (a Kubernetes API server, make kube-tools), netpol (kube in networkpolicy mode) or cluster (real Kubernetes nodes)")
	case "down":
	default:
		return command{}, fmt.Errorf("unknown subcommand %q\n%s", cmd.Verb, usage)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return command{}, err
	}
	if fs.NArg() > 0 {
		return command{}, fmt.Errorf("unexpected arguments %q\n%s", fs.Args(), usage)
	}
	if cmd.Verb == "up" && cmd.Mode != ModeCluster {
		if err := (netns.Config{Mode: cmd.Mode, Prefix: cmd.Prefix}).Validate(); err != nil {
			return command{}, fmt.Errorf("%w (or %s)", err, ModeCluster)
		}
	}
	return cmd, nil
}

func run(args []string) error {
	cmd, err := parse(args, os.Stderr)
	if err != nil {
		return err
	}
	if cmd.Verb == "down" {
		return down(cmd.Prefix)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if cmd.Mode == ModeCluster {
		d, err := cluster.Up(ctx, cluster.Config{Out: os.Stdout, Prefix: cmd.Prefix})
		if err != nil {
			return err
		}
		_, _, err = d.Show(ctx)
		return err
	}
	if cmd.Mode != netns.ModeEtcd && os.Getenv("GVS_KUBE_BIN") == "" {
		// make kube-tools puts the Kubernetes programs beside gvs-demo.
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		os.Setenv("GVS_KUBE_BIN", filepath.Dir(exe))
	}
	_, err = netns.Up(ctx, netns.Config{Out: os.Stdout, Mode: cmd.Mode, Prefix: cmd.Prefix})
	return err
}

// down removes both demos: the namespace demo and the cluster demo on their
// default prefixes, or whatever lab is on prefix.
func down(prefix string) error {
	if prefix != "" {
		// kubetest.DestroyCluster removes a lab of either kind.
		if err := cluster.Down(prefix); err != nil {
			return err
		}
		fmt.Println("demo removed: namespaces", prefix+"-*", "and their processes are gone")
		return nil
	}
	if err := netns.Down(netns.Prefix); err != nil {
		return err
	}
	fmt.Println("demo removed: namespaces", netns.Prefix+"-*", "and their processes are gone")
	if err := cluster.Down(cluster.Prefix); err != nil {
		return err
	}
	fmt.Println("cluster demo removed:", cluster.Prefix)
	return nil
}
