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

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
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
	mode := fs.String("mode", "etcd", "etcd (gvs-master's embedded registry), kube (a Kubernetes API server, make kube-tools) or netpol (kube in networkpolicy mode)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "up":
		if *mode != "etcd" && *mode != "kube" && *mode != "netpol" {
			return fmt.Errorf("demo: -mode %q: etcd, kube or netpol", *mode)
		}
		return demoUp(ctx, *prefix, *mode)
	case "down":
		if err := lab.DestroyPrefix(*prefix); err != nil {
			return err
		}
		fmt.Println("demo removed: namespaces", *prefix+"-*", "and their processes are gone")
		return nil
	}
	return fmt.Errorf("demo: unknown subcommand %q (up or down)", args[0])
}

func demoUp(ctx context.Context, prefix string, mode string) error {
	kube, netpol := mode == "kube" || mode == "netpol", mode == "netpol"
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
	spec := cluster.Spec{
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
	}
	plane := "gvs-master with its embedded etcd"
	if kube {
		// A Kubernetes API server in n1's namespace (on Debian's etcd);
		// gvs-master in Kubernetes mode gives Namespaces their
		// NetNamespaces and Nodes their HostSubnets; the nodes follow
		// the API server as the gvs-node ServiceAccount and install
		// their CNI plugin as the DaemonSet does.
		spec.ControlPlane, spec.VNIDs = cluster.ControlPlaneKube, nil
		plane = "a Kubernetes API server and gvs-master in Kubernetes mode"
		if netpol {
			spec.Mode = "networkpolicy"
			plane += ", networkpolicy mode"
		}
		if os.Getenv("GVS_KUBE_BIN") == "" {
			os.Setenv("GVS_KUBE_BIN", bin) // make kube-tools puts them beside gvs-bench
		}
	}
	step("creating 2 nodes with 3 pods each (projects default, alpha, beta) in network namespaces " + prefix + "-*,\n    control plane: " + plane + ",\n    pods attached by CNI ADD (libcni → gvs-cni → gvs-switchd)")
	c, err := cluster.Up(ctx, spec)
	if err != nil {
		return err
	}
	if kube {
		for _, args := range [][]string{{"nodes"}, {"projects", "list"}} {
			step("gvsctl --kubeconfig admin.kubeconfig " + strings.Join(args, " "))
			out, err := c.KubeCtl(ctx, args...)
			if err != nil {
				return err
			}
			fmt.Print(indent(string(out)))
		}
	}
	for i, n := range c.Nodes {
		out, err := c.Ctl(ctx, i, "show")
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		fmt.Print(indent(string(out)))
	}

	if netpol {
		step("reachability (networkpolicy mode, no policy yet: every pod reaches every other)")
	} else {
		step("reachability (multitenant: a pod reaches another iff same VNID or either VNID is 0)")
	}
	m := c.Reachability(ctx)
	m.Print(os.Stdout)
	bad := m.Mismatches()

	if kube {
		bad = append(bad, demoKubeRBAC(ctx, c, step)...)
	} else {
		bad = append(bad, demoRegistryRefused(ctx, c, bin, step)...)
	}

	ext := c.Lab.External
	src := c.Nodes[0].Pods[1]
	step(fmt.Sprintf("NAT egress: %s (%s) → external host %s through tun0", src.Name, src.IP, ext.IP))
	srv, err := c.Lab.Start(ctx, ext.NS, filepath.Join(c.Lab.StateDir(), "ext-tcp.log"), filepath.Join(bin, "gvs-bench"), "tcp-server", "-l", ":5201")
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	out, err := c.Lab.Exec(ctx, src.NS, filepath.Join(bin, "gvs-bench"), "tcp-client", "-c", ext.IP.String()+":5201", "-bytes", "1000000")
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

	if netpol {
		bad = append(bad, demoNetworkPolicy(ctx, c, step)...)
	}
	bad = append(bad, demoServices(ctx, c, bin, step)...)
	if kube {
		bad = append(bad, demoEgressFirewall(ctx, c, bin, step)...)
	}
	if !netpol { // networkpolicy mode refuses renumbering projects, as OpenShift
		bad = append(bad, demoLiveIsolation(ctx, c, step)...)
	}

	gvsctl := filepath.Join(bin, "gvsctl")
	ctlPlane := fmt.Sprintf("-etcd %s -etcd-cacert %s -etcd-cert %s -etcd-key %s", strings.Join(c.EtcdEndpoints, ","),
		c.AdminTLS().CA, c.AdminTLS().Cert, c.AdminTLS().Key)
	services := fmt.Sprintf("ip netns exec %s %s %s services list", c.Nodes[0].NS, gvsctl, ctlPlane)
	creds := fmt.Sprintf("the administrator's certificate gvs-master made on first start is in %s", c.PKIDir())
	if kube {
		ctlPlane = "--kubeconfig " + c.KubeAdmin
		services = "(Services are the API server's: kube-proxy programs them, gvs-switchd follows them)"
		creds = ctlPlane + " is an admin kubeconfig for the API server; gvs-master's log is " + filepath.Join(c.Lab.StateDir(), "master.log")
	}
	fmt.Printf(`
The cluster keeps running. Look around:
  ip netns exec %[1]s %[2]s -s %[3]s dump-ports
  ip netns exec %[1]s %[2]s -s %[3]s dump-flows table=80
  ip netns exec %[1]s %[2]s -s %[3]s trace in_port=%[8]d,ip,nw_src=%[4]s,nw_dst=%[5]s
  ip netns exec %[6]s ping %[5]s
  ip netns exec %[1]s %[2]s %[7]s projects list    (and join, isolate, make-global)
  ip netns exec %[1]s %[2]s %[7]s nodes
  %[10]s
(%[9]s)
Tear it down with:  make demo-down
`, c.Nodes[0].NS, gvsctl, c.Nodes[0].Socket, a.IP, b.IP, a.NS, ctlPlane,
		daemon.CNIFirstPort+1, // a is the second pod CNI attached on n1
		creds, services)
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

// demoRegistryRefused shows a tenant pod refused by the registry, and
// returns what went wrong.
func demoRegistryRefused(ctx context.Context, c *cluster.Cluster, bin string, step func(string)) []string {
	var bad []string
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

	return bad
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n") + "\n"
}
