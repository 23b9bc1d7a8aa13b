package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/flagargs"
	"github.com/gvswitch/gvs/sdn/kube"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/pki"
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
9447) with an administrator's certificate of the gvs cluster CA
(--trace-tls, default --etcd-tls); the registry (--etcd) or, with
--kubeconfig, the HostSubnets say where the nodes are. The answer is the
same from any host.
`

// nodeLister returns where the nodes' trace endpoints are (why.NodesOf,
// why.NodesOfHostSubnets).
type nodeLister func(ctx context.Context, port uint16) (map[string]netip.AddrPort, error)

// registryNodes lists the nodes of the etcd registry.
func registryNodes(dc registry.DialConfig) nodeLister {
	return func(ctx context.Context, port uint16) (map[string]netip.AddrPort, error) {
		c, err := registry.Dial(dc)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		nodes, err := registry.New(c).Nodes(ctx)
		if err != nil {
			return nil, err
		}
		return why.NodesOf(nodes, port), nil
	}
}

// kubeNodes lists the nodes of a Kubernetes cluster by their HostSubnets.
func kubeNodes(kubeconfig string) nodeLister {
	return func(ctx context.Context, port uint16) (map[string]netip.AddrPort, error) {
		rc, err := kube.RESTConfig(kubeconfig)
		if err != nil {
			return nil, err
		}
		nc, err := networkv1.NewForConfig(rc)
		if err != nil {
			return nil, err
		}
		hss, err := nc.HostSubnets().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return why.NodesOfHostSubnets(hss.Items, port), nil
	}
}

// whyCmd answers gvsctl why: the nodes from list, their trace endpoints
// called with the identity in id.
func whyCmd(ctx context.Context, list nodeLister, id pki.Files, asJSON bool, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("gvsctl why", flag.ContinueOnError)
	port := fs.Uint("trace-port", why.DefaultPort, "TCP port of the nodes' trace endpoints")
	matrix := fs.Bool("matrix", false, "answer for every ordered pair of running pods")
	fs.Usage = func() { fmt.Fprint(fs.Output(), whyUsage); fs.PrintDefaults() }
	pos, err := flagargs.Parse(fs, args) // flags may come before or after the pods
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
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
	if id.IsZero() {
		return errors.New("why needs an administrator's certificate of the gvs cluster CA (--trace-tls, or --etcd-tls with the registry): the nodes' trace endpoints admit only administrators and gvs-master")
	}
	tlsCfg, err := id.ClientConfig()
	if err != nil {
		return err
	}
	nodes, err := list(ctx, uint16(*port))
	if err != nil {
		return err
	}
	r := &why.Remote{TLS: tlsCfg, Nodes: nodes}
	names := slices.Sorted(maps.Keys(r.Nodes))
	pods, podErrs := listPods(ctx, r, names)
	show := printer(out, asJSON)
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
	node, pass := "", -1
	for i, st := range a.Steps {
		if st.Node != node {
			node, pass = st.Node, -1
			fmt.Fprintf(w, "\non node %s:\n", node)
		}
		if st.Pass != pass {
			if st.Pass > 0 {
				fmt.Fprintf(w, "  recirculation %d (after ct, ct_state=trk|new):\n", st.Pass)
			}
			pass = st.Pass
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
