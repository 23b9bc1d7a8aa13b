package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gvswitch/gvs/bench/cluster"
	"github.com/gvswitch/gvs/bench/lab"
	"github.com/gvswitch/gvs/internal/daemon"
)

// demoUnderlay is the demo's underlay network. It exists only inside the
// demo's namespaces.
var demoUnderlay = netip.MustParsePrefix("192.168.240.0/24")

func demo(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("demo needs up or down")
	}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	prefix := fs.String("prefix", "gvs-demo", "namespace name prefix")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "up":
		return demoUp(ctx, *prefix)
	case "down":
		if err := lab.DestroyPrefix(*prefix); err != nil {
			return err
		}
		fmt.Println("demo removed: namespaces", *prefix+"-*", "and their processes are gone")
		return nil
	}
	return fmt.Errorf("demo: unknown subcommand %q (up or down)", args[0])
}

func demoUp(ctx context.Context, prefix string) error {
	if os.Geteuid() != 0 {
		return errors.New("the demo creates network namespaces: run it as root")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	bin := filepath.Dir(exe)
	_ = lab.DestroyPrefix(prefix) // a previous demo that was not taken down
	step := func(s string) { fmt.Printf("==> %s\n", s) }
	step("creating 2 nodes with 3 pods each (projects default, alpha, beta) in network namespaces " + prefix + "-*,\n    pods attached by CNI ADD (libcni → gvs-cni → gvs-switchd)")
	c, err := cluster.Up(ctx, cluster.Spec{
		Lab: lab.Spec{Prefix: prefix, Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"},
			Underlay: demoUnderlay, External: true},
		Mode:   "multitenant",
		VNIDs:  map[string]uint32{"default": 0, "alpha": 10, "beta": 11},
		BinDir: bin,
		// gvs-master (embedded etcd) in n1's namespace allocates subnets
		// and VNIDs; the nodes register and follow it.
		ControlPlane: cluster.ControlPlaneEmbedded,
		// Pods are attached by real CNI ADD calls (libcni → gvs-cni →
		// gvs-switchd); each TAP is created in its pod's namespace.
		CNI: true,
	})
	if err != nil {
		return err
	}
	for i, n := range c.Nodes {
		out, err := c.Ctl(ctx, i, "show")
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		fmt.Print(indent(string(out)))
	}

	step("reachability (multitenant: a pod reaches another iff same VNID or either VNID is 0)")
	m := c.Reachability(ctx)
	m.Print(os.Stdout)
	bad := m.Mismatches()

	tenant := c.Nodes[0].Pods[2]
	registry := netip.AddrPortFrom(c.Nodes[0].IP, 2379).String()
	step(fmt.Sprintf("control plane: tenant pod %s (project %s) tries the registry at %s without credentials", tenant.Name, tenant.Project, registry))
	out, err := c.Lab.Exec(ctx, tenant.NS, filepath.Join(bin, "gvs-bench"), "registry-probe", "-c", registry)
	fmt.Print(indent(string(out)))
	if err != nil {
		bad = append(bad, "a tenant pod got an answer from the registry: "+err.Error())
	} else {
		fmt.Println("    refused: etcd speaks only TLS with a client certificate from the cluster CA, and a node's certificate writes only its own record")
	}

	ext := c.Lab.External
	src := c.Nodes[0].Pods[1]
	step(fmt.Sprintf("NAT egress: %s (%s) → external host %s through tun0", src.Name, src.IP, ext.IP))
	srv, err := c.Lab.Start(ctx, ext.NS, filepath.Join(c.Lab.StateDir(), "ext-tcp.log"), filepath.Join(bin, "gvs-bench"), "tcp-server", "-l", ":5201")
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	out, err = c.Lab.Exec(ctx, src.NS, filepath.Join(bin, "gvs-bench"), "tcp-client", "-c", ext.IP.String()+":5201", "-bytes", "1000000")
	fmt.Print(indent(string(out)))
	if err != nil {
		bad = append(bad, "NAT egress failed: "+err.Error())
	} else if !strings.Contains(string(out), "seen as "+c.Nodes[0].IP.String()+":") {
		bad = append(bad, fmt.Sprintf("the external host did not see the node address %s as the source", c.Nodes[0].IP))
	} else {
		fmt.Printf("    the external host sees the node's address %s, not the pod's %s\n", c.Nodes[0].IP, src.IP)
	}
	srv.Stop()

	a, b := c.Nodes[0].Pods[1], c.Nodes[1].Pods[1]
	step(fmt.Sprintf("TCP throughput across nodes: %s → %s (project %s, VXLAN VNI %d)", a.Name, b.Name, a.Project, a.VNID))
	srv, err = c.Lab.Start(ctx, b.NS, filepath.Join(c.Lab.StateDir(), "pod-tcp.log"), filepath.Join(bin, "gvs-bench"), "tcp-server", "-l", ":5201")
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	out, err = c.Lab.Exec(ctx, a.NS, filepath.Join(bin, "gvs-bench"), "tcp-client", "-c", b.IP.String()+":5201", "-t", "5s")
	fmt.Print(indent(string(out)))
	if err != nil {
		bad = append(bad, "TCP throughput run failed: "+err.Error())
	}
	srv.Stop()

	bad = append(bad, demoServices(ctx, c, bin, step)...)
	bad = append(bad, demoLiveIsolation(ctx, c, step)...)

	gvsctl := filepath.Join(bin, "gvsctl")
	fmt.Printf(`
The cluster keeps running. Look around:
  ip netns exec %[1]s %[2]s -s %[3]s dump-ports
  ip netns exec %[1]s %[2]s -s %[3]s dump-flows table=80
  ip netns exec %[1]s %[2]s -s %[3]s trace in_port=%[8]d,ip,nw_src=%[4]s,nw_dst=%[5]s
  ip netns exec %[6]s ping %[5]s
  ip netns exec %[1]s %[2]s -etcd %[7]s %[9]s projects list    (and join, isolate, make-global)
  ip netns exec %[1]s %[2]s -etcd %[7]s %[9]s nodes
  ip netns exec %[1]s %[2]s -etcd %[7]s %[9]s services list
(the administrator's certificate gvs-master made on first start is in %[10]s)
Tear it down with:  make demo-down
`, c.Nodes[0].NS, gvsctl, c.Nodes[0].Socket, a.IP, b.IP, a.NS, strings.Join(c.EtcdEndpoints, ","),
		daemon.CNIFirstPort+1, // a is the second pod CNI attached on n1
		fmt.Sprintf("-etcd-cacert %s -etcd-cert %s -etcd-key %s", c.AdminTLS().CA, c.AdminTLS().Cert, c.AdminTLS().Key),
		c.PKIDir())
	if len(bad) > 0 {
		fmt.Println("\nDEMO FAILED:")
		for _, s := range bad {
			fmt.Println("  -", s)
		}
		return errors.New("the demo's checks failed")
	}
	fmt.Println("\ndemo: all checks passed")
	return nil
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n") + "\n"
}
