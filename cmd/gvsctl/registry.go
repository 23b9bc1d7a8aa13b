package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/registry"
)

// registryCmd runs the control-plane commands (projects, nodes) against
// etcd directly; every change is a compare-and-swap transaction.
func registryCmd(ctx context.Context, dc registry.DialConfig, asJSON bool, out io.Writer, cmd string, args []string) error {
	c, err := registry.Dial(dc)
	if err != nil {
		return err
	}
	defer c.Close()
	reg := registry.New(c)
	show := printer(out, asJSON)
	if cmd == "nodes" {
		subs, _, err := reg.Subnets(ctx)
		if err != nil {
			return err
		}
		nodes, err := reg.Nodes(ctx)
		if err != nil {
			return err
		}
		type row struct {
			Name   string `json:"name"`
			IP     string `json:"ip"`
			Subnet string `json:"subnet"`
		}
		byName := map[string]*row{}
		for _, n := range nodes {
			byName[n.Name] = &row{Name: n.Name, IP: n.IP.String(), Subnet: "(pending)"}
		}
		for _, s := range subs {
			r := byName[s.Node]
			if r == nil {
				r = &row{Name: s.Node, IP: s.IP.String()}
				byName[s.Node] = r
			}
			r.Subnet = s.Subnet.String()
		}
		rows := make([]row, 0, len(byName))
		for _, k := range slices.Sorted(maps.Keys(byName)) {
			rows = append(rows, *byName[k])
		}
		return show(rows, func() {
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tIP\tSUBNET")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, r.IP, r.Subnet)
			}
			tw.Flush()
		})
	}
	switch cmd {
	case "services":
		return servicesCmd(ctx, reg, show, out, args)
	case "policy":
		return policyCmd(ctx, reg, show, out, args)
	case "label":
		return labelCmd(ctx, reg, show, out, args)
	case "labels":
		return labelsCmd(ctx, reg, show, out)
	case "egress-firewall":
		return egressFirewallCmd(ctx, reg, show, out, args)
	case "hosts":
		return hostsCmd(ctx, reg, show, out, args)
	case "egress-ip":
		return egressIPCmd(ctx, reg, show, out, args)
	}
	// projects
	if len(args) == 0 {
		args = []string{"list"}
	}
	op, names := args[0], args[1:]
	var fn func(*master.VNIDs) error
	switch op {
	case "list":
	case "create":
		fn = func(v *master.VNIDs) error {
			for _, n := range names {
				if _, err := v.Create(n); err != nil {
					return err
				}
			}
			return nil
		}
	case "delete":
		fn = func(v *master.VNIDs) error {
			for _, n := range names {
				if err := v.Delete(n); err != nil {
					return err
				}
			}
			return nil
		}
	case "join":
		if len(names) < 2 {
			return errors.New("projects join needs a target and at least one project")
		}
		fn = func(v *master.VNIDs) error { return v.Join(names[0], names[1:]...) }
	case "isolate":
		fn = func(v *master.VNIDs) error { return v.Isolate(names...) }
	case "make-global":
		fn = func(v *master.VNIDs) error { return v.MakeGlobal(names...) }
	case "enable-multicast", "disable-multicast":
		if len(names) == 0 {
			return fmt.Errorf("projects %s needs project names", op)
		}
		err := reg.SetProjectMulticast(ctx, op == "enable-multicast", names...)
		if registry.IsRefused(err) {
			return fmt.Errorf("%w (etcd refuses your certificate's user this change: projects are changed by gvs-master and administrators)", err)
		}
		if err != nil {
			return err
		}
		op = "list"
	default:
		return fmt.Errorf("unknown projects command %q (list, create, delete, join, isolate, make-global, enable-multicast, disable-multicast)", op)
	}
	if op != "list" && len(names) == 0 {
		return fmt.Errorf("projects %s needs project names", op)
	}
	var projects map[string]uint32
	if fn == nil {
		projects, err = reg.Projects(ctx)
	} else {
		cfg, cerr := reg.GetConfig(ctx)
		if cerr != nil && !errors.Is(cerr, registry.ErrNoConfig) {
			return cerr
		}
		projects, err = reg.UpdateProjects(ctx, cfg.GlobalProjects, fn)
	}
	if registry.IsRefused(err) {
		return fmt.Errorf("%w (etcd refuses your certificate's user this change: projects are changed by gvs-master and administrators)", err)
	}
	if err != nil {
		return err
	}
	recs, err := reg.ProjectRecords(ctx)
	if err != nil {
		return err
	}
	return show(projects, func() {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROJECT\tVNID\tMULTICAST")
		for _, k := range slices.Sorted(maps.Keys(projects)) {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", k, projects[k], onOff(recs[k].Multicast))
		}
		tw.Flush()
	})
}

// onOff is a flag as gvsctl's tables print it.
func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// servicesCmd lists, sets and deletes the registry's services.
func servicesCmd(ctx context.Context, reg *registry.Registry, show func(any, func()) error, out io.Writer, args []string) error {
	if len(args) == 0 {
		args = []string{"list"}
	}
	op, rest := args[0], args[1:]
	switch op {
	case "list":
		svcs, err := reg.Services(ctx)
		if err != nil {
			return err
		}
		return show(svcs, func() {
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVICE\tCLUSTER-IP\tPORTS")
			for _, k := range slices.Sorted(maps.Keys(svcs)) {
				var ports []string
				for _, p := range svcs[k].Ports {
					ports = append(ports, fmt.Sprintf("%s/%d", strings.ToLower(p.Protocol), p.Port))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", k, svcs[k].ClusterIP, strings.Join(ports, ","))
			}
			tw.Flush()
		})
	case "set":
		if len(rest) < 3 {
			return errors.New("usage: services set NS/NAME CLUSTER-IP PROTO/PORT…")
		}
		ns, name, ok := strings.Cut(rest[0], "/")
		if !ok {
			return fmt.Errorf("service %q: want NAMESPACE/NAME", rest[0])
		}
		ip, err := netip.ParseAddr(rest[1])
		if err != nil {
			return fmt.Errorf("ClusterIP: %w", err)
		}
		rec := registry.Service{ClusterIP: ip}
		for _, pp := range rest[2:] {
			proto, port, ok := strings.Cut(pp, "/")
			n, err := strconv.ParseUint(port, 10, 16)
			if !ok || err != nil || n == 0 {
				return fmt.Errorf("port %q: want PROTO/PORT (tcp/80)", pp)
			}
			if _, err := registry.ParseProtocol(proto); err != nil {
				return err
			}
			rec.Ports = append(rec.Ports, registry.ServicePort{Protocol: strings.ToUpper(proto), Port: uint16(n)})
		}
		return reg.SetService(ctx, ns, name, rec)
	case "delete":
		if len(rest) == 0 {
			return errors.New("usage: services delete NS/NAME…")
		}
		for _, k := range rest {
			ns, name, ok := strings.Cut(k, "/")
			if !ok {
				return fmt.Errorf("service %q: want NAMESPACE/NAME", k)
			}
			if err := reg.DeleteService(ctx, ns, name); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("services: unknown operation %q (list, set, delete)", op)
}
