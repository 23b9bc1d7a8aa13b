package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/gvswitch/gvs/sdn/kube"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// kubeCmd runs projects and nodes against a Kubernetes API server: the
// projects are the NetNamespaces, the nodes the HostSubnets. join, isolate
// and make-global write the change-network annotation, as
// `oc adm pod-network` does, and wait for gvs-master to apply it.
func kubeCmd(ctx context.Context, kubeconfig string, asJSON bool, out io.Writer, cmd string, args []string) error {
	rc, err := kube.RESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	nc, err := networkv1.NewForConfig(rc)
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	k := kubeCtl{ctx: ctx, net: nc, kube: kc, json: asJSON, out: out}
	if cmd == "nodes" {
		return k.nodes()
	}
	if cmd == "hosts" {
		return k.hosts(args)
	}
	if cmd == "egress-ip" {
		return k.egressIP(args)
	}
	if len(args) == 0 {
		args = []string{"list"}
	}
	op, names := args[0], args[1:]
	if op != "list" && len(names) == 0 {
		return fmt.Errorf("projects %s needs project names", op)
	}
	switch op {
	case "list":
		return k.list()
	case "create":
		return k.create(names)
	case "delete":
		for _, n := range names {
			if err := kc.CoreV1().Namespaces().Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				return err
			}
		}
		return k.list()
	case "join":
		if len(names) < 2 {
			return errors.New("projects join needs a target and at least one project")
		}
		return k.change(names[1:], networkv1.ChangeNetwork{Action: networkv1.ActionJoin, Project: names[0]})
	case "isolate":
		return k.change(names, networkv1.ChangeNetwork{Action: networkv1.ActionIsolate})
	case "make-global":
		return k.change(names, networkv1.ChangeNetwork{Action: networkv1.ActionGlobal})
	case "enable-multicast", "disable-multicast":
		return k.multicast(names, op == "enable-multicast")
	}
	return fmt.Errorf("unknown projects command %q (list, create, delete, join, isolate, make-global, enable-multicast, disable-multicast)", op)
}

type kubeCtl struct {
	ctx  context.Context
	net  *networkv1.Client
	kube kubernetes.Interface
	json bool
	out  io.Writer
}

func (k kubeCtl) show(v any, text func(tw *tabwriter.Writer)) error {
	if k.json {
		enc := json.NewEncoder(k.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	text(tw)
	return tw.Flush()
}

// list prints the projects (NetNamespaces) and their VNIDs; a change
// gvs-master has not applied (or refused) is shown as pending.
func (k kubeCtl) list() error {
	l, err := k.net.NetNamespaces().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	projects := map[string]uint32{}
	pending := map[string]string{}
	multicast := map[string]bool{}
	for _, n := range l.Items {
		projects[n.Name] = n.NetID
		if v, ok := n.Annotations[networkv1.ChangePodNetworkAnnotation]; ok {
			pending[n.Name] = v
		}
		multicast[n.Name] = n.Annotations[networkv1.MulticastEnabledAnnotation] == "true"
	}
	return k.show(projects, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "PROJECT\tVNID\tMULTICAST\tPENDING")
		for _, n := range slices.Sorted(maps.Keys(projects)) {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", n, projects[n], onOff(multicast[n]), pending[n])
		}
	})
}

// create creates Namespaces and waits for gvs-master to give each its
// NetNamespace.
func (k kubeCtl) create(names []string) error {
	for _, n := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if _, err := k.kube.CoreV1().Namespaces().Create(k.ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, n := range names {
		if err := k.wait(n, func(*networkv1.NetNamespace) bool { return true }); err != nil {
			return fmt.Errorf("%s: no NetNamespace yet (is gvs-master running?): %w", n, err)
		}
	}
	return k.list()
}

// change writes the change-network annotation on each project's
// NetNamespace and waits until gvs-master has removed it.
func (k kubeCtl) change(names []string, c networkv1.ChangeNetwork) error {
	if c.Action == networkv1.ActionJoin {
		if _, err := k.net.NetNamespaces().Get(k.ctx, c.Project); err != nil {
			return fmt.Errorf("project %s to join: %w", c.Project, err)
		}
	}
	for _, n := range names {
		if c.Action == networkv1.ActionJoin && n == c.Project {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			nn, err := k.net.NetNamespaces().Get(k.ctx, n)
			if err != nil {
				return err
			}
			if nn.Annotations == nil {
				nn.Annotations = map[string]string{}
			}
			nn.Annotations[networkv1.ChangePodNetworkAnnotation] = c.String()
			_, err = k.net.NetNamespaces().Update(k.ctx, nn)
			return err
		})
		if err != nil {
			return fmt.Errorf("project %s: %w", n, err)
		}
	}
	for _, n := range names {
		err := k.wait(n, func(nn *networkv1.NetNamespace) bool {
			_, pending := nn.Annotations[networkv1.ChangePodNetworkAnnotation]
			return !pending
		})
		if err != nil {
			return fmt.Errorf("project %s: gvs-master did not apply %s (refused, or not running: see its log): %w", n, c, err)
		}
	}
	return k.list()
}

// multicast opts projects in to multicast or out: the NetNamespace
// annotation netnamespace.network.openshift.io/multicast-enabled=true, as
// `oc annotate netnamespace` sets it; the nodes follow it.
func (k kubeCtl) multicast(names []string, on bool) error {
	for _, n := range names {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			nn, err := k.net.NetNamespaces().Get(k.ctx, n)
			if err != nil {
				return err
			}
			if on {
				if nn.Annotations == nil {
					nn.Annotations = map[string]string{}
				}
				nn.Annotations[networkv1.MulticastEnabledAnnotation] = "true"
			} else {
				delete(nn.Annotations, networkv1.MulticastEnabledAnnotation)
			}
			_, err = k.net.NetNamespaces().Update(k.ctx, nn)
			return err
		})
		if err != nil {
			return fmt.Errorf("project %s: %w", n, err)
		}
	}
	return k.list()
}

// wait polls a NetNamespace until it exists and done holds (or the
// command's timeout).
func (k kubeCtl) wait(name string, done func(*networkv1.NetNamespace) bool) error {
	for {
		nn, err := k.net.NetNamespaces().Get(k.ctx, name)
		switch {
		case apierrors.IsNotFound(err):
			nn = nil
		case err != nil:
			return err
		}
		if nn != nil && done(nn) {
			return nil
		}
		select {
		case <-k.ctx.Done():
			return k.ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// nodes prints the Nodes with their InternalIPs and HostSubnets.
func (k kubeCtl) nodes() error {
	hss, err := k.net.HostSubnets().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	nodes, err := k.kube.CoreV1().Nodes().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	type row struct {
		Name   string `json:"name"`
		IP     string `json:"ip"`
		Subnet string `json:"subnet"`
	}
	byName := map[string]*row{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		ip := ""
		if a := kube.InternalIP(n); a.IsValid() {
			ip = a.String()
		}
		byName[n.Name] = &row{Name: n.Name, IP: ip, Subnet: "(pending)"}
	}
	for _, h := range hss.Items {
		r := byName[h.Name]
		if r == nil {
			r = &row{Name: h.Name}
			byName[h.Name] = r
		}
		r.IP, r.Subnet = h.HostIP, h.Subnet
	}
	rows := make([]row, 0, len(byName))
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		rows = append(rows, *byName[n])
	}
	return k.show(rows, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "NODE\tIP\tSUBNET")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, r.IP, strings.TrimSpace(r.Subnet))
		}
	})
}
