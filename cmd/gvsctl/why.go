package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/sdn/why"
)

const whyUsage = `usage: gvsctl why [--trace-port N] POD-A POD-B [PROTO/PORT]
       gvsctl why [--trace-port N] --matrix [PROTO/PORT]

Why can (or can't) POD-A open a connection to POD-B? The first packet is
traced through the real tables of POD-A's node and, through the tunnel, of
POD-B's node; the answer names the step that decided. Pods are
NAMESPACE/NAME or an address; PROTO/PORT is tcp/PORT, udp/PORT or icmp
(the default). --matrix answers for every pair of running pods.

The nodes are reached on their trace endpoints (underlay address, port
9447) with the administrator's certificate (--etcd-tls); the registry
(--etcd) says where the nodes are. The answer is the same from any host.
`

// whyCmd answers gvsctl why in the etcd-registry mode.
func whyCmd(ctx context.Context, dc registry.DialConfig, asJSON bool, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("gvsctl why", flag.ContinueOnError)
	port := fs.Uint("trace-port", why.DefaultPort, "TCP port of the nodes' trace endpoints")
	matrix := fs.Bool("matrix", false, "answer for every ordered pair of running pods")
	fs.Usage = func() { fmt.Fprint(fs.Output(), whyUsage); fs.PrintDefaults() }
	var pos []string
	for { // flags may come before or after the pods
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if *port == 0 || *port > 65535 {
		return errors.New("--trace-port must be 1 to 65535")
	}
	want := 2
	if *matrix {
		want = 0
	}
	if len(pos) < want || len(pos) > want+1 {
		fs.Usage()
		return errors.New("why needs two pods and optionally PROTO/PORT (or --matrix and optionally PROTO/PORT)")
	}
	target, err := why.ParseTarget(strings.Join(pos[want:], ""))
	if err != nil {
		return err
	}
	if dc.TLS.IsZero() {
		return errors.New("why needs the administrator's certificate (--etcd-tls): the nodes' trace endpoints admit only administrators and gvs-master")
	}
	tlsCfg, err := dc.TLS.ClientConfig()
	if err != nil {
		return err
	}
	c, err := registry.Dial(dc)
	if err != nil {
		return err
	}
	defer c.Close()
	nodes, err := registry.New(c).Nodes(ctx)
	if err != nil {
		return err
	}
	r := &why.Remote{TLS: tlsCfg, Nodes: why.NodesOf(nodes, uint16(*port))}
	names := slices.Sorted(maps.Keys(r.Nodes))
	pods, podErrs := listPods(ctx, r, names)
	show := func(v any, text func()) error {
		if asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		}
		text()
		return nil
	}
	if *matrix {
		if podErrs != nil {
			return podErrs // a matrix without a node's pods would mislead
		}
		m, err := why.Matrix(ctx, r, pods, target)
		if err != nil {
			return err
		}
		return show(m, func() { fmt.Fprint(out, m) })
	}
	var q why.Question
	q.Target = target
	for i, ref := range pos[:2] {
		p, err := why.Find(pods, ref)
		if err != nil {
			return errors.Join(err, podErrs)
		}
		if i == 0 {
			q.From = p
		} else {
			q.To = p
		}
	}
	a, err := why.Ask(ctx, r, q)
	if err != nil {
		return err
	}
	return show(a, func() { printAnswer(out, a) })
}

// listPods lists the pods of every node it reaches; the error names the
// nodes it could not.
func listPods(ctx context.Context, r *why.Remote, nodes []string) ([]why.Pod, error) {
	var all []why.Pod
	var errs []error
	for _, n := range nodes {
		ps, err := why.ListPods(ctx, r, []string{n})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		all = append(all, ps...)
	}
	return all, errors.Join(errs...)
}

func printAnswer(w io.Writer, a why.Answer) {
	q := a.Question
	verdict := "REFUSED"
	if a.Allowed {
		verdict = "ALLOWED"
	}
	fmt.Fprintf(w, "%s (node %s, %s, VNID %d) → %s (node %s, %s, VNID %d) %s: %s\n",
		q.From, q.From.Node, q.From.IP, q.From.VNID, q.To, q.To.Node, q.To.IP, q.To.VNID, q.Target, verdict)
	fmt.Fprintf(w, "%s\n", a.Reason)
	node := ""
	for i, st := range a.Steps {
		if st.Node != node {
			node = st.Node
			fmt.Fprintf(w, "\non node %s:\n", node)
		}
		mark := "  "
		if i == a.Decided {
			mark = "=>"
		}
		rule := st.Rule
		if rule == "" {
			rule = fmt.Sprintf("table=%d (no rule matched)", st.Table)
		}
		fmt.Fprintf(w, "%s %s%s\n%s %s   -> %s\n", mark, strings.Repeat("  ", st.Depth), rule, "  ", strings.Repeat("  ", st.Depth), st.Did)
	}
	if st, ok := a.DecidingStep(); ok {
		fmt.Fprintf(w, "\ndecided by table %d on node %s (cookie %#x, priority %d)\n", st.Table, st.Node, st.Cookie, st.Priority)
	}
}
