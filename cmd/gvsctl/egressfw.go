package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/registry"
)

// readEgressFirewalls reads OpenShift EgressNetworkPolicies from file
// (readObjects) and checks their rules as the nodes read them.
func readEgressFirewalls(file, namespace string) ([]*networkv1.EgressNetworkPolicy, error) {
	objs, err := readObjects[networkv1.EgressNetworkPolicy](file, namespace, networkv1.GroupVersion().String(), "EgressNetworkPolicy")
	if err != nil {
		return nil, err
	}
	for _, np := range objs {
		if _, err := source.EgressRulesOf(np); err != nil {
			return nil, fmt.Errorf("%s: egress firewall %s/%s: %w", file, np.Namespace, np.Name, err)
		}
	}
	return objs, nil
}

// egressFirewallCmd applies, lists and deletes the registry's egress
// firewalls (OpenShift's EgressNetworkPolicy, the YAML oc takes).
func egressFirewallCmd(ctx context.Context, reg *registry.Registry, show func(any, func()) error, out io.Writer, args []string) error {
	if len(args) == 0 {
		args = []string{"get"}
	}
	op := args[0]
	fs := flag.NewFlagSet("egress-firewall "+op, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	namespace := fs.String("n", "", "namespace (project)")
	file := fs.String("f", "", "file with EgressNetworkPolicies (YAML or JSON; - is standard input)")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("egress-firewall %s: %w", op, err)
	}
	rest := fs.Args()
	switch op {
	case "apply":
		if *file == "" || len(rest) > 0 {
			return errors.New("usage: egress-firewall apply -f FILE [-n NS]")
		}
		objs, err := readEgressFirewalls(*file, *namespace)
		if err != nil {
			return err
		}
		for _, np := range objs {
			if err := reg.SetEgressFirewall(ctx, np); err != nil {
				return err
			}
			fmt.Fprintf(out, "egressnetworkpolicy %s/%s applied\n", np.Namespace, np.Name)
		}
		return nil
	case "delete":
		var keys [][2]string
		switch {
		case *file != "":
			objs, err := readObjects[networkv1.EgressNetworkPolicy](*file, *namespace, networkv1.GroupVersion().String(), "EgressNetworkPolicy")
			if err != nil {
				return err
			}
			for _, np := range objs {
				keys = append(keys, [2]string{np.Namespace, np.Name})
			}
		case len(rest) > 0:
			for _, name := range rest {
				ns, n := splitNamespaced(*namespace, name)
				if ns == "" {
					return fmt.Errorf("egress firewall %q: -n NS or NS/NAME", name)
				}
				keys = append(keys, [2]string{ns, n})
			}
		default:
			return errors.New("usage: egress-firewall delete -n NS NAME… | -f FILE")
		}
		for _, k := range keys {
			ok, err := reg.DeleteEgressFirewall(ctx, k[0], k[1])
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("egressnetworkpolicy %s/%s not found", k[0], k[1])
			}
			fmt.Fprintf(out, "egressnetworkpolicy %s/%s deleted\n", k[0], k[1])
		}
		return nil
	case "get", "list":
		list, err := reg.EgressFirewalls(ctx, *namespace)
		if err != nil {
			return err
		}
		return show(list, func() {
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAMESPACE\tNAME\tRULES")
			for _, np := range list {
				var rules []string
				for _, r := range np.Spec.Egress {
					to := r.To.CIDRSelector
					if to == "" {
						to = r.To.DNSName
					}
					rules = append(rules, string(r.Type)+" "+to)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", np.Namespace, np.Name, strings.Join(rules, ", "))
			}
			tw.Flush()
		})
	}
	return fmt.Errorf("egress-firewall: unknown operation %q (apply, get, delete)", op)
}
