package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/gvswitch/gvs/sdn/registry"
)

// egressIPRow is where one egress IP of a project lives, as gvsctl
// egress-ip list prints it.
type egressIPRow struct {
	Project  string `json:"project"`
	EgressIP string `json:"egressIP"`
	Node     string `json:"node,omitempty"`
	// State: serving (the project's traffic leaves from it), standby (a
	// node hosts it, an earlier one serves), unassigned (no node hosts
	// it), node-gone (its node has no subnet), conflict (several projects
	// or nodes name it), invalid (not an IPv4 address).
	State string `json:"state"`
}

// egressIPRows works out where each project's egress IPs live, as the
// nodes do (internal/daemon/source, egressip.go): live lists the nodes
// that have a subnet.
func egressIPRows(projects, nodes map[string][]string, live map[string]bool) []egressIPRow {
	claims, hosts := map[string][]string{}, map[string][]string{}
	for p, ips := range projects {
		for _, ip := range slices.Compact(slices.Clone(ips)) {
			claims[ip] = append(claims[ip], p)
		}
	}
	for n, ips := range nodes {
		for _, ip := range slices.Compact(slices.Clone(ips)) {
			hosts[ip] = append(hosts[ip], n)
		}
	}
	var rows []egressIPRow
	for _, p := range slices.Sorted(maps.Keys(projects)) {
		served := false
		for _, ip := range projects[p] {
			r := egressIPRow{Project: p, EgressIP: ip}
			if len(hosts[ip]) == 1 {
				r.Node = hosts[ip][0]
			}
			a, err := netip.ParseAddr(ip)
			switch {
			case err != nil || !a.Is4():
				r.State = "invalid"
			case len(claims[ip]) > 1 || len(hosts[ip]) > 1:
				r.State = "conflict"
				r.Node = strings.Join(hosts[ip], ",")
			case r.Node == "":
				r.State = "unassigned"
			case !live[r.Node]:
				r.State = "node-gone"
			case served:
				r.State = "standby"
			default:
				r.State, served = "serving", true
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func printEgressIPRows(out io.Writer, rows []egressIPRow) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	writeEgressIPRows(tw, rows)
	tw.Flush()
}

// writeEgressIPRows writes the table's header and rows (a node of "" as "-").
func writeEgressIPRows(tw io.Writer, rows []egressIPRow) {
	fmt.Fprintln(tw, "PROJECT\tEGRESS IP\tNODE\tSTATE")
	for _, r := range rows {
		node := r.Node
		if node == "" {
			node = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Project, r.EgressIP, node, r.State)
	}
}

// parseEgressArgs reads "project|node NAME [IP...]".
func parseEgressArgs(args []string) (kind, name string, ips []netip.Addr, err error) {
	if len(args) < 2 || args[0] != "project" && args[0] != "node" {
		return "", "", nil, errors.New("usage: egress-ip [list] | egress-ip project P [IP...] | egress-ip node N [IP...]")
	}
	for _, s := range args[2:] {
		ip, err := netip.ParseAddr(s)
		if err != nil || !ip.Is4() {
			return "", "", nil, fmt.Errorf("egress IP %q is not an IPv4 address", s)
		}
		ips = append(ips, ip)
	}
	return args[0], args[1], ips, nil
}

// parseEgressCIDRs reads the CIDRs of "cidrs N [CIDR...]", masked.
func parseEgressCIDRs(args []string) ([]netip.Prefix, error) {
	var cidrs []netip.Prefix
	for _, s := range args {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			return nil, fmt.Errorf("egress CIDR %q is not an IPv4 network", s)
		}
		cidrs = append(cidrs, p.Masked())
	}
	return cidrs, nil
}

// egressIPCmd runs gvsctl egress-ip against the etcd registry.
func egressIPCmd(ctx context.Context, reg *registry.Registry, show func(any, func()) error, out io.Writer, args []string) error {
	if len(args) > 1 && args[0] == "cidrs" {
		cidrs, err := parseEgressCIDRs(args[2:])
		if err != nil {
			return err
		}
		return reg.SetNodeEgressCIDRs(ctx, args[1], cidrs)
	}
	if len(args) > 0 && args[0] != "list" {
		kind, name, ips, err := parseEgressArgs(args)
		if err != nil {
			return err
		}
		if kind == "project" {
			return reg.SetProjectEgressIPs(ctx, name, ips)
		}
		return reg.SetNodeEgressIPs(ctx, name, ips)
	}
	st, err := reg.AllEgressIPs(ctx)
	if err != nil {
		return err
	}
	projects, nodes := map[string][]string{}, map[string][]string{}
	for p, rec := range st.Projects {
		projects[p] = rec.IPs
	}
	for n, rec := range st.Nodes {
		nodes[n] = append(nodes[n], rec.IPs...)
	}
	for n, rec := range st.Assigned { // gvs-master's, from the nodes' egress CIDRs
		nodes[n] = append(nodes[n], rec.IPs...)
	}
	subs, _, err := reg.Subnets(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, s := range subs {
		live[s.Node] = true
	}
	rows := egressIPRows(projects, nodes, live)
	return show(rows, func() { printEgressIPRows(out, rows) })
}

// egressIP runs gvsctl egress-ip against the API server: NetNamespace and
// HostSubnet egressIPs.
func (k kubeCtl) egressIP(args []string) error {
	if len(args) > 1 && args[0] == "cidrs" {
		cidrs, err := parseEgressCIDRs(args[2:])
		if err != nil {
			return err
		}
		return retry.RetryOnConflict(retry.DefaultRetry, func() error { // gvs-master may update it meanwhile
			hs, err := k.net.HostSubnets().Get(k.ctx, args[1])
			if err != nil {
				return err
			}
			hs.EgressCIDRs = nil
			for _, c := range cidrs {
				hs.EgressCIDRs = append(hs.EgressCIDRs, c.String())
			}
			_, err = k.net.HostSubnets().Update(k.ctx, hs)
			return err
		})
	}
	if len(args) > 0 && args[0] != "list" {
		kind, name, ips, err := parseEgressArgs(args)
		if err != nil {
			return err
		}
		var ss []string
		for _, ip := range ips {
			ss = append(ss, ip.String())
		}
		return retry.RetryOnConflict(retry.DefaultRetry, func() error { // gvs-master may update it meanwhile
			if kind == "project" {
				nn, err := k.net.NetNamespaces().Get(k.ctx, name)
				if err != nil {
					return err
				}
				nn.EgressIPs = ss
				_, err = k.net.NetNamespaces().Update(k.ctx, nn)
				return err
			}
			hs, err := k.net.HostSubnets().Get(k.ctx, name)
			if err != nil {
				return err
			}
			hs.EgressIPs = ss
			_, err = k.net.HostSubnets().Update(k.ctx, hs)
			return err
		})
	}
	nns, err := k.net.NetNamespaces().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	hss, err := k.net.HostSubnets().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	projects, nodes, live := map[string][]string{}, map[string][]string{}, map[string]bool{}
	for _, nn := range nns.Items {
		if len(nn.EgressIPs) > 0 {
			projects[nn.NetName] = nn.EgressIPs
		}
	}
	for _, hs := range hss.Items {
		live[hs.Name] = true
		if len(hs.EgressIPs) > 0 {
			nodes[hs.Name] = hs.EgressIPs
		}
	}
	rows := egressIPRows(projects, nodes, live)
	return k.show(rows, func(tw *tabwriter.Writer) { writeEgressIPRows(tw, rows) })
}
