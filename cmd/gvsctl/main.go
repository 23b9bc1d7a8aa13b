// Command gvsctl is the operator's CLI for gvs-switchd: ports, flows in
// ovs-ofctl syntax, packet traces and counters. Every command can print JSON
// (-o json).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
)

const usage = `usage: gvsctl [-s SOCKET] [-o text|json] COMMAND [ARGS]

commands:
  show                    node, mode, ports, rules and remote nodes
  dump-ports              ports with their counters
  dump-flows [FILTER]     rules with packet/byte counters (FILTER: ovs-ofctl match, e.g. table=20)
  add-flow RULE           add one rule in ovs-ofctl syntax
  add-flows FILE          add the rules in FILE, one per line ("-" reads standard input)
  del-flows [--strict] [FILTER]
                          delete the rules FILTER selects (all rules without one)
  trace [--ct-next STATE]... PACKET
                          follow a described packet (e.g. in_port=3,ip,nw_src=10.128.0.3,nw_dst=10.128.2.3)
                          table by table, through ct actions and their recirculations;
                          --ct-next gives the ct_state of each recirculation in turn (e.g. trk|est)
                          instead of what the tracker holds; when the packet leaves through the
                          tunnel, says how to go on
  stats                   drops by reason and table, lookups, cache hits
  dump-conntrack [zone=N] tracked connections, as ovs-appctl dpctl/dump-conntrack -s prints them
  flush-conntrack [zone=N] [ct_nw_src=A,ct_nw_dst=B,ct_nw_proto=P[,ct_tp_src=S,ct_tp_dst=D]]
                          forget every connection, those of a zone, or the one with that tuple
                          (either direction; ICMP: icmp_type, icmp_code, icmp_id)
  conntrack-stats         connections by protocol and state, created, expired, evicted, invalid
  pods                    attached pods
  capture PORT -w FILE [-c COUNT] [-G DURATION] [-d in|out|both] [--snaplen N]
                          capture the frames of a port (number, name or pod) into a pcap
                          file for tcpdump/Wireshark; -w - writes to standard output
                          (gvsctl capture vxlan0 -w - | tcpdump -nr -); gvsctl capture -h

control plane (talks to etcd over TLS: --etcd URL[,URL...] or $GVS_ETCD, and an administrator's
certificate from gvs-master cert admin: --etcd-tls DIR or $GVS_ETCD_TLS):
  projects list           projects and their VNIDs
  projects create P...    new projects (fresh VNIDs; default and global projects get 0)
  projects delete P...    delete projects (a VNID no project uses is released)
  projects join A P...    give projects P... the VNID of A
  projects isolate P...   give each project a fresh VNID of its own (not default)
  projects make-global P...
                          give projects VNID 0
  projects enable-multicast P... | disable-multicast P...
                          opt projects in to multicast (or out): every pod of the project's VNID
                          receives its pods' multicast, on every node (Kubernetes: the NetNamespace
                          annotation netnamespace.network.openshift.io/multicast-enabled=true)
  nodes                   registered nodes with their underlay IPs and subnets
  hosts add NAME IP [--subnet CIDR] [--fixed-vnid VNID]
                          register a host that is not a node (OpenShift's F5 "ramp"): every node
                          tunnels its subnet (from gvs-master, or CIDR if free) to IP; with
                          --fixed-vnid only that VNID (and global pods) reach it, with that VNI
  hosts delete NAME...    unregister hosts (their subnets are released)
  egress-ip [list]        where each project's egress IPs live: node and state (serving, standby,
                          unassigned, node-gone, conflict, invalid); also with --kubeconfig
  egress-ip project P [IP...]
                          set project P's egress IPs, in order (none: remove them); the first one a
                          reachable node hosts serves; with --kubeconfig: the NetNamespace's egressIPs
  egress-ip node N [IP...]
                          set the egress IPs node N hosts (none: remove them); with --kubeconfig:
                          the HostSubnet's egressIPs
  egress-ip cidrs N [CIDR...]
                          the ranges gvs-master may assign projects' egress IPs to node N from
                          (OpenShift's egressCIDRs; etcd registry only): an egress IP no node names
                          goes to a live node whose CIDRs contain it, and moves when that node's
                          lease expires
  services list           services (etcd-registry mode): in multitenant mode a pod reaches only
                          its own project's services and those of global projects
  services set NS/NAME CLUSTER-IP PROTO/PORT...
                          record a service (e.g. services set alpha/web 172.30.0.10 tcp/80 udp/53)
  services delete NS/NAME...
                          delete services
  policy apply -f FILE [-n NS]
                          create or replace NetworkPolicies (networkpolicy mode, etcd registry):
                          the YAML or JSON kubectl takes, checked before any is written
  policy get [-n NS] [NAME...]
                          list NetworkPolicies (-o json: the policies themselves)
  policy delete -n NS NAME... | -f FILE
                          delete NetworkPolicies
  label namespace NS [KEY=VALUE | KEY-]...
                          set or remove a namespace's labels, or show them
                          (kubernetes.io/metadata.name is always the namespace's name)
  label pod NS/NAME [KEY=VALUE | KEY- | port NAME=PROTO/NUMBER | port NAME-]...
                          set or remove a pod's labels and named ports, or show them
  labels                  every namespace's and pod's labels
  egress-firewall apply -f FILE [-n NS]
                          create or replace egress firewalls (OpenShift EgressNetworkPolicy YAML;
                          multitenant and networkpolicy modes, etcd registry)
  egress-firewall get [-n NS]
                          list egress firewalls
  egress-firewall delete -n NS NAME... | -f FILE
                          delete egress firewalls
  why POD-A POD-B [PROTO/PORT]
                          can POD-A (NAMESPACE/NAME or address) open a connection to POD-B on
                          tcp/PORT, udp/PORT or icmp (default)? Traces the first packet through
                          the real tables of both pods' nodes, on their trace endpoints (port
                          9447, administrators only: --trace-tls DIR or --etcd-tls), and names the
                          rule that decided; with --kubeconfig the nodes come from the HostSubnets
  why --matrix [PROTO/PORT]
                          the same for every ordered pair of running pods

  With --kubeconfig FILE the same commands work on a Kubernetes API server:
  projects are Namespaces with their NetNamespaces; join, isolate and
  make-global write the annotation oc adm pod-network writes and wait for
  gvs-master to apply it; create and delete create and delete Namespaces;
  nodes lists Nodes with their HostSubnets; hosts add creates a HostSubnet
  with the assign-subnet (and fixed-vnid-host) annotations, hosts delete
  deletes it.
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gvsctl:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gvsctl", flag.ContinueOnError)
	socket := fs.String("s", envOr("GVS_SOCKET", control.DefaultSocket), "gvs-switchd control socket ($GVS_SOCKET)")
	output := fs.String("o", "text", "output format: text or json")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the daemon")
	etcd := fs.String("etcd", os.Getenv("GVS_ETCD"), "etcd endpoints for projects and nodes ($GVS_ETCD)")
	etcdTLS := fs.String("etcd-tls", os.Getenv("GVS_ETCD_TLS"), "directory with ca.crt, tls.crt, tls.key: your etcd identity, from gvs-master cert admin ($GVS_ETCD_TLS)")
	etcdCA := fs.String("etcd-cacert", os.Getenv("GVS_ETCD_CACERT"), "etcd CA file, overrides -etcd-tls ($GVS_ETCD_CACERT)")
	etcdCert := fs.String("etcd-cert", os.Getenv("GVS_ETCD_CERT"), "etcd client certificate, overrides -etcd-tls ($GVS_ETCD_CERT)")
	etcdKey := fs.String("etcd-key", os.Getenv("GVS_ETCD_KEY"), "etcd client key, overrides -etcd-tls ($GVS_ETCD_KEY)")
	etcdInsecure := fs.Bool("etcd-insecure", os.Getenv("GVS_ETCD_INSECURE") == "1", "allow a plain-text etcd (lab use only; $GVS_ETCD_INSECURE=1)")
	traceTLS := fs.String("trace-tls", os.Getenv("GVS_TRACE_TLS"), "directory with ca.crt, tls.crt, tls.key: an administrator's certificate of the gvs cluster CA for the nodes' trace endpoints (gvsctl why; default: the etcd identity; $GVS_TRACE_TLS)")
	kubeconfig := fs.String("kubeconfig", "", "Kubernetes mode: projects and nodes from this API server's NetNamespaces and HostSubnets")
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *output != "text" && *output != "json" {
		return fmt.Errorf("-o must be text or json, not %q", *output)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no command")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c := cli{ctx: ctx, socket: *socket, json: *output == "json", out: stdout}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "projects", "nodes", "hosts", "services", "policy", "label", "labels", "egress-firewall", "egress-ip", "why":
		if *kubeconfig != "" && cmd == "why" {
			// The nodes serve their trace endpoints with certificates of the
			// gvs cluster CA given to them as files (traceTLS): there is no
			// Kubernetes-native identity for it yet (docs/security.md).
			var id pki.Files
			if *traceTLS != "" {
				id = pki.Dir(*traceTLS).Files("tls")
			}
			return whyCmd(ctx, kubeNodes(*kubeconfig), id, c.json, c.out, rest)
		}
		if *kubeconfig != "" && cmd == "services" {
			return errors.New("services: in Kubernetes mode gvs-switchd follows the API server's Services (kubectl get services)")
		}
		if *kubeconfig != "" && cmd != "projects" && cmd != "nodes" && cmd != "hosts" && cmd != "egress-ip" {
			return fmt.Errorf("%s: in Kubernetes mode gvs-switchd follows the API server's objects and labels (kubectl apply, kubectl label)", cmd)
		}
		if *kubeconfig != "" {
			return kubeCmd(ctx, *kubeconfig, c.json, c.out, cmd, rest)
		}
		if *etcd == "" {
			return errors.New("--etcd (or $GVS_ETCD) is required for " + cmd)
		}
		dc := registry.DialConfig{Endpoints: strings.Split(*etcd, ","), Insecure: *etcdInsecure}
		if *etcdTLS != "" {
			dc.TLS = pki.Dir(*etcdTLS).Files("tls")
		}
		for _, o := range []struct{ dst, v *string }{{&dc.TLS.CA, etcdCA}, {&dc.TLS.Cert, etcdCert}, {&dc.TLS.Key, etcdKey}} {
			if *o.v != "" {
				*o.dst = *o.v
			}
		}
		if cmd == "why" {
			id := dc.TLS
			if *traceTLS != "" {
				id = pki.Dir(*traceTLS).Files("tls")
			}
			return whyCmd(ctx, registryNodes(dc), id, c.json, c.out, rest)
		}
		return registryCmd(ctx, dc, c.json, c.out, cmd, rest)
	case "capture":
		return captureCmd(ctx, *socket, c.json, c.out, os.Stderr, rest)
	case "show":
		var r control.ShowResult
		return c.call(control.Request{Command: "show"}, &r, func() { printShow(c.out, r) })
	case "dump-ports":
		var r []control.Port
		return c.call(control.Request{Command: "dump-ports"}, &r, func() { printPorts(c.out, r) })
	case "dump-flows":
		var r []control.Flow
		return c.call(control.Request{Command: "dump-flows", Args: strings.Join(rest, ",")}, &r, func() { printFlows(c.out, r) })
	case "add-flow":
		if len(rest) == 0 {
			return errors.New("add-flow needs a rule")
		}
		var r control.CountResult
		return c.call(control.Request{Command: "add-flows", Args: strings.Join(rest, " ")}, &r,
			func() { fmt.Fprintf(c.out, "added %d rule(s)\n", r.Count) })
	case "add-flows":
		if len(rest) != 1 {
			return errors.New("add-flows needs one FILE (or - for standard input)")
		}
		text, err := readFile(rest[0])
		if err != nil {
			return err
		}
		var r control.CountResult
		return c.call(control.Request{Command: "add-flows", Args: text}, &r,
			func() { fmt.Fprintf(c.out, "added %d rule(s)\n", r.Count) })
	case "del-flows":
		strict := false
		if len(rest) > 0 && rest[0] == "--strict" {
			strict, rest = true, rest[1:]
		}
		var r control.CountResult
		return c.call(control.Request{Command: "del-flows", Args: strings.Join(rest, ","), Strict: strict}, &r,
			func() { fmt.Fprintf(c.out, "deleted %d rule(s)\n", r.Count) })
	case "trace":
		args, err := traceArgs(rest)
		if err != nil {
			return err
		}
		var r control.TraceResult
		return c.call(control.Request{Command: "trace", Args: args}, &r, func() { printTrace(c.out, r) })
	case "stats":
		var r control.Stats
		return c.call(control.Request{Command: "stats"}, &r, func() { printStats(c.out, r) })
	case "dump-conntrack":
		var r control.ConntrackDump
		return c.call(control.Request{Command: "dump-conntrack", Args: strings.Join(rest, ",")}, &r, func() {
			for _, e := range r.Entries {
				fmt.Fprintln(c.out, e)
			}
		})
	case "flush-conntrack":
		var r control.CountResult
		return c.call(control.Request{Command: "flush-conntrack", Args: strings.Join(rest, ",")}, &r,
			func() { fmt.Fprintf(c.out, "flushed %d connection(s)\n", r.Count) })
	case "conntrack-stats":
		var r control.ConntrackStats
		return c.call(control.Request{Command: "conntrack-stats"}, &r, func() { printConntrackStats(c.out, r) })
	case "pods":
		var r []json.RawMessage
		return c.call(control.Request{Command: "pods"}, &r, func() {
			for _, p := range r {
				fmt.Fprintln(c.out, string(p))
			}
		})
	}
	fs.Usage()
	return fmt.Errorf("unknown command %q", cmd)
}

type cli struct {
	ctx    context.Context
	socket string
	json   bool
	out    io.Writer
}

// call sends req, decodes the result into res and prints it as JSON or with text.
func (c cli) call(req control.Request, res any, text func()) error {
	if err := control.Call(c.ctx, c.socket, req, res); err != nil {
		return err
	}
	if c.json {
		enc := json.NewEncoder(c.out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	text()
	return nil
}

func readFile(name string) (string, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(name)
	}
	return string(b), err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func printShow(w io.Writer, r control.ShowResult) {
	fmt.Fprintf(w, "node %s (%s) subnet %s mode %s, gvs %s\n", r.Node, r.NodeIP, r.Subnet, r.Mode, r.Version)
	if r.SubnetChanges > 0 {
		fmt.Fprintf(w, "  subnet changes: %d (lost %s to another node)\n", r.SubnetChanges, r.PreviousSubnet)
	}
	fmt.Fprintf(w, "  ports: %d  pods: %d  rules: %d  table generation: %d\n", r.Ports, r.Pods, r.Rules, r.Generation)
	if r.IOEngine != "" {
		fmt.Fprintf(w, "  pod TAP I/O: %s\n", r.IOEngine)
	}
	if r.SchedSlice != "" {
		fmt.Fprintf(w, "  thread time slice: %s\n", r.SchedSlice)
	}
	if r.RxBuffers != "" {
		fmt.Fprintf(w, "  receive buffers: %s\n", r.RxBuffers)
	}
	if r.Rings != "" {
		fmt.Fprintf(w, "  io_uring rings: %s\n", r.Rings)
	}
	if r.BusyPoll != "" {
		fmt.Fprintf(w, "  busy polling: %s\n", r.BusyPoll)
	}
	if r.Tunnel != "" {
		fmt.Fprintf(w, "  vxlan0: %s\n", r.Tunnel)
	}
	for _, rm := range r.Remotes {
		fmt.Fprintf(w, "  remote %s %s subnet %s", rm.Name, rm.IP, rm.Subnet)
		if rm.FixedVNID != nil {
			fmt.Fprintf(w, " fixed VNID %d (not a node)", *rm.FixedVNID)
		}
		fmt.Fprintln(w)
	}
	if g := r.Registry; g != nil {
		switch {
		case g.Insecure:
			fmt.Fprintf(w, "  registry %s: INSECURE (plain text, no certificate)\n", strings.Join(g.Endpoints, ","))
		case g.CertSerial == "":
			fmt.Fprintf(w, "  registry %s as %s (no connection yet)\n", strings.Join(g.Endpoints, ","), g.Identity)
		default:
			fmt.Fprintf(w, "  registry %s as %s, certificate %s valid until %s\n", strings.Join(g.Endpoints, ","), g.Identity,
				g.CertSerial, g.CertNotAfter.Format(time.RFC3339))
		}
	}
}

func printPorts(w io.Writer, ports []control.Port) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tNAME\tKIND\tRX PKTS\tRX BYTES\tRX DROPS\tTX PKTS\tTX BYTES\tTX DROPS")
	for _, p := range ports {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", p.No, p.Name, p.Kind,
			p.RxPackets, p.RxBytes, p.RxDrops, p.TxPackets, p.TxBytes, p.TxDrops)
	}
	tw.Flush()
}

func printFlows(w io.Writer, flows []control.Flow) {
	for _, f := range flows {
		fmt.Fprintf(w, " cookie=%#x, table=%d, n_packets=%d, n_bytes=%d, %s\n", f.Cookie, f.Table, f.Packets, f.Bytes, stripHead(f.Rule))
	}
}

// stripHead removes the table= and cookie= parts a rule's text starts with,
// since dump-flows prints them in ovs-ofctl's order already.
func stripHead(rule string) string {
	parts := strings.Split(rule, ", ")
	out := parts[:0]
	for _, p := range parts {
		if strings.HasPrefix(p, "table=") || strings.HasPrefix(p, "cookie=") {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ", ")
}

// traceArgs makes the trace request's argument: the packet description
// with a ct_next=STATE item for each --ct-next (flowtable.ParseTrace reads
// it). The states are checked here, so that a typo fails before the call.
func traceArgs(rest []string) (string, error) {
	var desc, next []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		v, ok := strings.CutPrefix(a, "--ct-next=")
		if a == "--ct-next" {
			if i+1 == len(rest) {
				return "", errors.New("--ct-next needs a state, e.g. trk|est")
			}
			v, ok = rest[i+1], true
			i++
		}
		if !ok {
			desc = append(desc, a)
			continue
		}
		if _, err := flowtable.ParseCTState(v); err != nil {
			return "", fmt.Errorf("--ct-next %s: %w", v, err)
		}
		next = append(next, "ct_next="+v)
	}
	if len(desc) == 0 {
		return "", errors.New("trace needs a packet description, e.g. in_port=3,ip,nw_src=10.128.0.3,nw_dst=10.128.2.3")
	}
	return strings.Join(append(desc, next...), ","), nil
}

func printTrace(w io.Writer, r control.TraceResult) {
	fmt.Fprintf(w, "on node %s:\n%s", r.Node, r.Text)
	if !strings.HasSuffix(r.Text, "\n") {
		fmt.Fprintln(w)
	}
	for _, n := range r.Next {
		fmt.Fprintf(w, "\nthe packet continues on node %s (%s); trace it there with:\n  gvsctl trace '%s'\n", n.Node, n.NodeIP, n.Packet)
	}
}

func printStats(w io.Writer, s control.Stats) {
	fmt.Fprintf(w, "lookups: %d  cache hits: %d\n", s.Lookups, s.CacheHits)
	fmt.Fprintln(w, "drops by reason:")
	for _, r := range slices.Sorted(maps.Keys(s.Drops)) {
		fmt.Fprintf(w, "  %-18s %d\n", r, s.Drops[r])
	}
	if len(s.TableDrops) > 0 {
		fmt.Fprintln(w, "drops by table:")
		for t := 0; t < 256; t++ {
			if n, ok := s.TableDrops[t]; ok {
				fmt.Fprintf(w, "  table %-3d %d\n", t, n)
			}
		}
	}
}

func printConntrackStats(w io.Writer, s control.ConntrackStats) {
	fmt.Fprintf(w, "connections: %d of %d\n", s.Entries, s.Max)
	fmt.Fprintf(w, "created: %d  expired: %d  evicted: %d  flushed: %d  invalid: %d\n",
		s.Created, s.Expired, s.Evicted, s.Flushed, s.Invalid)
	if len(s.ByClass) > 0 {
		fmt.Fprintln(w, "by protocol and state:")
		for _, k := range slices.Sorted(maps.Keys(s.ByClass)) {
			fmt.Fprintf(w, "  %-18s %d\n", k, s.ByClass[k])
		}
	}
	if len(s.Reasons) > 0 {
		fmt.Fprintln(w, "invalid packets and refused commits by reason:")
		for _, k := range slices.Sorted(maps.Keys(s.Reasons)) {
			fmt.Fprintf(w, "  %-18s %d\n", k, s.Reasons[k])
		}
	}
}
