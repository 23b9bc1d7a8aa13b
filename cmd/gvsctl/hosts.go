package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/registry"
)

// hostSpec is what `gvsctl hosts add` was given.
type hostSpec struct {
	name      string
	ip        netip.Addr
	subnet    netip.Prefix // none: gvs-master assigns one
	fixedVNID *uint32
}

// parseHostsAdd parses `hosts add NAME IP [--subnet CIDR] [--fixed-vnid V]`.
func parseHostsAdd(args []string) (hostSpec, error) {
	const use = "usage: hosts add NAME IP [--subnet CIDR] [--fixed-vnid VNID]"
	fs := flag.NewFlagSet("hosts add", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	subnet := fs.String("subnet", "", "the subnet to ask for (default: any)")
	fixed := fs.String("fixed-vnid", "", "the one VNID the host's traffic carries (default: none, the host is treated as a node)")
	var pos []string
	for len(args) > 0 { // flags may follow the positional arguments
		if err := fs.Parse(args); err != nil {
			return hostSpec{}, fmt.Errorf("%w\n%s", err, use)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != 2 {
		return hostSpec{}, errors.New(use)
	}
	h := hostSpec{name: pos[0]}
	var err error
	if h.ip, err = netip.ParseAddr(pos[1]); err != nil || !h.ip.Is4() {
		return h, fmt.Errorf("host %s: address %q is not IPv4", h.name, pos[1])
	}
	if *subnet != "" {
		if h.subnet, err = netip.ParsePrefix(*subnet); err != nil {
			return h, fmt.Errorf("--subnet: %w", err)
		}
		h.subnet = h.subnet.Masked()
	}
	if *fixed != "" {
		v, err := strconv.ParseUint(*fixed, 10, 32)
		if err != nil || v > registry.MaxVNID {
			return h, fmt.Errorf("--fixed-vnid %q: want a VNID, 0..%d", *fixed, registry.MaxVNID)
		}
		v32 := uint32(v)
		h.fixedVNID = &v32
	}
	return h, nil
}

// hostRow is a host that is not a node, as gvsctl hosts list prints it.
type hostRow struct {
	Name      string  `json:"name"`
	IP        string  `json:"ip"`
	Subnet    string  `json:"subnet,omitempty"` // none yet: gvs-master has not answered
	FixedVNID *uint32 `json:"fixedVNID,omitempty"`
}

// writeHostRows writes the hosts table (a missing subnet or VNID as "-").
func writeHostRows(w io.Writer, rows []hostRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tIP\tSUBNET\tFIXED VNID")
	for _, r := range rows {
		subnet, vnid := cmp.Or(r.Subnet, "-"), "-"
		if r.FixedVNID != nil {
			vnid = strconv.FormatUint(uint64(*r.FixedVNID), 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.IP, subnet, vnid)
	}
	tw.Flush()
}

// hostsCmd lists, registers and unregisters hosts that are not nodes
// (OpenShift's F5 "ramp") in the etcd registry: add waits for gvs-master's
// subnet and prints it.
func hostsCmd(ctx context.Context, reg *registry.Registry, show func(any, func()) error, out io.Writer, args []string) error {
	if len(args) == 0 || args[0] == "list" {
		hs, err := reg.Hosts(ctx)
		if err != nil {
			return err
		}
		rows := []hostRow{}
		for _, h := range hs {
			r := hostRow{Name: h.Name, IP: h.IP.String(), FixedVNID: h.FixedVNID}
			if h.Subnet.IsValid() {
				r.Subnet = h.Subnet.String()
			}
			rows = append(rows, r)
		}
		slices.SortFunc(rows, func(a, b hostRow) int { return strings.Compare(a.Name, b.Name) })
		return show(rows, func() { writeHostRows(out, rows) })
	}
	switch args[0] {
	case "add":
		h, err := parseHostsAdd(args[1:])
		if err != nil {
			return err
		}
		if err := reg.RegisterHost(ctx, registry.Host{Name: h.name, IP: h.ip, Want: h.subnet, FixedVNID: h.fixedVNID}); err != nil {
			return err
		}
		s, err := reg.WaitSubnet(ctx, h.name, 0)
		if err != nil {
			return fmt.Errorf("host %s registered, but no subnet from gvs-master yet (its log says why): %w", h.name, err)
		}
		fmt.Fprintf(out, "%s\t%s\t%s\n", h.name, s.IP, s.Subnet)
		return nil
	case "delete":
		for _, n := range args[1:] {
			if err := reg.UnregisterHost(ctx, n); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("hosts: unknown operation %q (list, add, delete)", args[0])
}

// hosts is hostsCmd in Kubernetes mode: list shows the HostSubnets that
// belong to no Node; add creates the HostSubnet (with the assign-subnet
// annotation unless --subnet is given, and fixed-vnid-host with
// --fixed-vnid) and waits for its subnet; delete deletes HostSubnets that
// belong to no Node.
func (k kubeCtl) hosts(args []string) error {
	hss := k.net.HostSubnets()
	if len(args) == 0 || args[0] == "list" {
		l, err := hss.List(k.ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		rows := []hostRow{}
		for _, hs := range l.Items {
			if hs.Annotations[networkv1.NodeUIDAnnotation] != "" {
				continue // a Node's
			}
			r := hostRow{Name: hs.Name, IP: hs.HostIP, Subnet: hs.Subnet}
			if v, err := strconv.ParseUint(hs.Annotations[networkv1.FixedVNIDHostAnnotation], 10, 32); err == nil {
				v32 := uint32(v)
				r.FixedVNID = &v32
			}
			rows = append(rows, r)
		}
		slices.SortFunc(rows, func(a, b hostRow) int { return strings.Compare(a.Name, b.Name) })
		return k.show(rows, func(tw *tabwriter.Writer) { writeHostRows(tw, rows) })
	}
	switch args[0] {
	case "add":
		h, err := parseHostsAdd(args[1:])
		if err != nil {
			return err
		}
		hs := &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: h.name, Annotations: map[string]string{}}, Host: h.name, HostIP: h.ip.String()}
		if h.subnet.IsValid() {
			hs.Subnet = h.subnet.String()
		} else {
			hs.Annotations[networkv1.AssignSubnetAnnotation] = "true"
		}
		if h.fixedVNID != nil {
			hs.Annotations[networkv1.FixedVNIDHostAnnotation] = strconv.FormatUint(uint64(*h.fixedVNID), 10)
		}
		if _, err := hss.Create(k.ctx, hs); err != nil {
			return err
		}
		for {
			got, err := hss.Get(k.ctx, h.name)
			if err == nil && got.Subnet != "" {
				fmt.Fprintf(k.out, "%s\t%s\t%s\n", h.name, got.HostIP, got.Subnet)
				return nil
			}
			select {
			case <-k.ctx.Done():
				return fmt.Errorf("HostSubnet %s created, but no subnet from gvs-master yet (its log says why): %w", h.name, k.ctx.Err())
			case <-time.After(200 * time.Millisecond): // polling the API server for gvs-master's answer
			}
		}
	case "delete":
		for _, n := range args[1:] {
			hs, err := hss.Get(k.ctx, n)
			if err != nil {
				return err
			}
			if hs.Annotations[networkv1.NodeUIDAnnotation] != "" {
				return fmt.Errorf("HostSubnet %s belongs to a Node; delete the Node instead", n)
			}
			if err := hss.Delete(k.ctx, n, metav1.DeleteOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("hosts: unknown operation %q (list, add, delete)", args[0])
}
