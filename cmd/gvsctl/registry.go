package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
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
	show := func(v any, text func()) error {
		if asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		}
		text()
		return nil
	}
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
	default:
		return fmt.Errorf("unknown projects command %q (list, create, delete, join, isolate, make-global)", op)
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
	return show(projects, func() {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROJECT\tVNID")
		for _, k := range slices.Sorted(maps.Keys(projects)) {
			fmt.Fprintf(tw, "%s\t%d\n", k, projects[k])
		}
		tw.Flush()
	})
}
