package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gvswitch/gvs/sdn/registry"
)

// policyCmd applies, lists and deletes the registry's NetworkPolicies
// (the networkpolicy mode without Kubernetes). apply and delete -f take
// the YAML (or JSON) kubectl takes: NetworkPolicy documents, or a List of
// them.
func policyCmd(ctx context.Context, reg *registry.Registry, show func(any, func()) error, out io.Writer, args []string) error {
	if len(args) == 0 {
		args = []string{"get"}
	}
	op := args[0]
	fs := flag.NewFlagSet("policy "+op, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	namespace := fs.String("n", "", "namespace (project)")
	file := fs.String("f", "", "file with NetworkPolicies (YAML or JSON; - is standard input)")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("policy %s: %w", op, err)
	}
	rest := fs.Args()
	switch op {
	case "apply", "delete":
		if op == "delete" && *file == "" {
			if len(rest) == 0 {
				return errors.New("usage: policy delete -n NS NAME... | -f FILE")
			}
			for _, name := range rest {
				ns, n := splitNamespaced(*namespace, name)
				if ns == "" {
					return fmt.Errorf("policy %q: -n NS or NS/NAME", name)
				}
				ok, err := reg.DeletePolicy(ctx, ns, n)
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("networkpolicy %s/%s not found", ns, n)
				}
				fmt.Fprintf(out, "networkpolicy %s/%s deleted\n", ns, n)
			}
			return nil
		}
		if *file == "" || len(rest) > 0 {
			return fmt.Errorf("usage: policy %s -f FILE [-n NS]", op)
		}
		policies, err := readPolicies(*file, *namespace)
		if err != nil {
			return err
		}
		// Every policy is checked before any is written.
		for _, np := range policies {
			if err := registry.ValidatePolicy(np); err != nil {
				return err
			}
		}
		for _, np := range policies {
			if op == "delete" {
				if _, err := reg.DeletePolicy(ctx, np.Namespace, np.Name); err != nil {
					return err
				}
				fmt.Fprintf(out, "networkpolicy %s/%s deleted\n", np.Namespace, np.Name)
				continue
			}
			if err := reg.SetPolicy(ctx, np); err != nil {
				return err
			}
			fmt.Fprintf(out, "networkpolicy %s/%s applied\n", np.Namespace, np.Name)
		}
		return nil
	case "get", "list":
		var list []*networkingv1.NetworkPolicy
		var err error
		if len(rest) > 0 {
			for _, name := range rest {
				ns, n := splitNamespaced(*namespace, name)
				if ns == "" {
					return fmt.Errorf("policy %q: -n NS or NS/NAME", name)
				}
				all, err := reg.Policies(ctx, ns)
				if err != nil {
					return err
				}
				i := slices.IndexFunc(all, func(p *networkingv1.NetworkPolicy) bool { return p.Name == n })
				if i < 0 {
					return fmt.Errorf("networkpolicy %s/%s not found", ns, n)
				}
				list = append(list, all[i])
			}
		} else if list, err = reg.Policies(ctx, *namespace); err != nil {
			return err
		}
		return show(list, func() {
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAMESPACE\tNAME\tPOD-SELECTOR\tTYPES")
			for _, np := range list {
				sel := metav1.FormatLabelSelector(&np.Spec.PodSelector)
				var types []string
				for _, t := range policyTypes(np) {
					types = append(types, string(t))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", np.Namespace, np.Name, sel, strings.Join(types, ","))
			}
			tw.Flush()
		})
	}
	return fmt.Errorf("policy: unknown operation %q (apply, get, delete)", op)
}

// policyTypes are a policy's types as Kubernetes defaults them: Ingress,
// and Egress if it has egress rules.
func policyTypes(np *networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	if len(np.Spec.PolicyTypes) > 0 {
		return np.Spec.PolicyTypes
	}
	t := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(np.Spec.Egress) > 0 {
		t = append(t, networkingv1.PolicyTypeEgress)
	}
	return t
}

// splitNamespaced takes "NS/NAME" or NAME with namespace ns.
func splitNamespaced(ns, s string) (string, string) {
	if a, b, ok := strings.Cut(s, "/"); ok {
		return a, b
	}
	return ns, s
}

// readPolicies reads NetworkPolicies from file (readObjects).
func readPolicies(file, namespace string) ([]*networkingv1.NetworkPolicy, error) {
	return readObjects[networkingv1.NetworkPolicy](file, namespace, "networking.k8s.io/v1", "NetworkPolicy")
}

// decodePolicies decodes NetworkPolicies (decodeObjects).
func decodePolicies(b []byte) ([]*networkingv1.NetworkPolicy, error) {
	return decodeObjects[networkingv1.NetworkPolicy](b, "networking.k8s.io/v1", "NetworkPolicy")
}

// object is a namespaced API object as gvsctl reads it from a file.
type object interface {
	GetName() string
	GetNamespace() string
	SetNamespace(string)
}

// readObjects reads objects of kind from file (YAML or JSON documents,
// each an object or a List of them; - is standard input). An object
// without a namespace takes namespace; one whose namespace differs from a
// given namespace is refused, as kubectl refuses it.
func readObjects[T any, PT interface {
	*T
	object
}](file, namespace, apiVersion, kind string) ([]PT, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	objs, err := decodeObjects[T, PT](b, apiVersion, kind)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, o := range objs {
		switch {
		case o.GetNamespace() == "" && namespace == "":
			return nil, fmt.Errorf("%s: %s %q has no namespace: give -n NS", file, strings.ToLower(kind), o.GetName())
		case o.GetNamespace() == "":
			o.SetNamespace(namespace)
		case namespace != "" && o.GetNamespace() != namespace:
			return nil, fmt.Errorf("%s: %s %s/%s is not in namespace %s", file, strings.ToLower(kind), o.GetNamespace(), o.GetName(), namespace)
		}
	}
	return objs, nil
}

// decodeObjects decodes YAML or JSON documents, each an object of kind
// (and apiVersion) or a List of them; unknown fields are errors (a
// misspelt field would otherwise vanish from the object silently).
func decodeObjects[T any, PT interface {
	*T
	object
}](b []byte, apiVersion, kind string) ([]PT, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []PT
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(raw, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		items := []json.RawMessage{raw}
		if tm.Kind == "List" || strings.HasSuffix(tm.Kind, "List") {
			var l struct {
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(raw, &l); err != nil {
				return nil, fmt.Errorf("document %d: %w", doc, err)
			}
			items = l.Items
		}
		for i, it := range items {
			o, err := decodeObject[T, PT](it, apiVersion, kind)
			if err != nil {
				return nil, fmt.Errorf("document %d, item %d: %w", doc, i+1, err)
			}
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s in it", kind)
	}
	return out, nil
}

func decodeObject[T any, PT interface {
	*T
	object
}](raw json.RawMessage, apiVersion, kind string) (PT, error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return nil, err
	}
	if tm.Kind != kind || tm.APIVersion != apiVersion {
		return nil, fmt.Errorf("kind %q, apiVersion %q: want %s, %s", tm.Kind, tm.APIVersion, kind, apiVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	o := PT(new(T))
	if err := dec.Decode(o); err != nil {
		return nil, fmt.Errorf("%s: %w", strings.ToLower(kind), err)
	}
	if o.GetName() == "" {
		return nil, fmt.Errorf("%s without metadata.name", strings.ToLower(kind))
	}
	return o, nil
}

// labelCmd sets and removes labels, as kubectl label does: KEY=VALUE sets,
// KEY- removes; without changes it shows them. A pod's named ports (which
// policies may name) are set with port NAME=PROTO/NUMBER and removed with
// port NAME-.
//
//	label namespace NS [KEY=VALUE | KEY-]...
//	label pod NS/NAME [KEY=VALUE | KEY- | port NAME=PROTO/NUMBER | port NAME-]...
func labelCmd(ctx context.Context, reg *registry.Registry, show func(any, func()) error, out io.Writer, args []string) error {
	if len(args) < 2 {
		return errors.New("usage: label namespace NS [KEY=VALUE|KEY-]… | label pod NS/NAME [KEY=VALUE|KEY-|port NAME=PROTO/NUMBER|port NAME-]…")
	}
	kind, target, rest := args[0], args[1], args[2:]
	set := map[string]string{}
	var remove []string
	var ports []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "port" && kind == "pod" {
			if i+1 == len(rest) {
				return errors.New("port: want NAME=PROTO/NUMBER or NAME-")
			}
			ports = append(ports, rest[i+1])
			i++
			continue
		}
		if k, v, ok := strings.Cut(a, "="); ok {
			set[k] = v
		} else if k, ok := strings.CutSuffix(a, "-"); ok && k != "" {
			remove = append(remove, k)
		} else {
			return fmt.Errorf("label %q: want KEY=VALUE or KEY-", a)
		}
	}
	changed := len(set) > 0 || len(remove) > 0 || len(ports) > 0
	switch kind {
	case "namespace", "ns", "project":
		old, err := reg.NamespaceLabels(ctx, target)
		if err != nil {
			return err
		}
		l := old
		if changed {
			if l, err = registry.EditLabels(old, set, remove); err != nil {
				return fmt.Errorf("namespace %s: %w", target, err)
			}
			if err := reg.SetNamespaceLabels(ctx, target, l); err != nil {
				return err
			}
		}
		return show(l, func() { printLabels(out, "namespace/"+target, l, nil) })
	case "pod":
		ns, name, ok := strings.Cut(target, "/")
		if !ok {
			return fmt.Errorf("pod %q: want NAMESPACE/NAME", target)
		}
		rec, err := reg.PodLabels(ctx, ns, name)
		if err != nil {
			return err
		}
		if changed {
			if rec.Labels, err = registry.EditLabels(rec.Labels, set, remove); err != nil {
				return fmt.Errorf("pod %s: %w", target, err)
			}
			if rec.Ports, err = editPorts(rec.Ports, ports); err != nil {
				return fmt.Errorf("pod %s: %w", target, err)
			}
			if err := reg.SetPodLabels(ctx, ns, name, rec); err != nil {
				return err
			}
		}
		return show(rec, func() { printLabels(out, "pod/"+target, rec.Labels, rec.Ports) })
	}
	return fmt.Errorf("label: %q: want namespace or pod", kind)
}

// editPorts applies NAME=PROTO/NUMBER and NAME- to named ports.
func editPorts(ports []registry.NamedPort, edits []string) ([]registry.NamedPort, error) {
	out := slices.Clone(ports)
	for _, e := range edits {
		if name, ok := strings.CutSuffix(e, "-"); ok && !strings.Contains(e, "=") {
			out = slices.DeleteFunc(out, func(p registry.NamedPort) bool { return p.Name == name })
			continue
		}
		name, spec, ok := strings.Cut(e, "=")
		proto, num, ok2 := strings.Cut(spec, "/")
		n, err := strconv.ParseUint(num, 10, 16)
		if !ok || !ok2 || err != nil || n == 0 {
			return nil, fmt.Errorf("port %q: want NAME=PROTO/NUMBER (http=tcp/8080) or NAME-", e)
		}
		if _, err := registry.ParseProtocol(proto); err != nil {
			return nil, fmt.Errorf("port %q: %w", e, err)
		}
		out = slices.DeleteFunc(out, func(p registry.NamedPort) bool { return p.Name == name })
		out = append(out, registry.NamedPort{Name: name, Protocol: strings.ToUpper(proto), Port: uint16(n)})
	}
	slices.SortFunc(out, func(a, b registry.NamedPort) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func printLabels(out io.Writer, what string, l map[string]string, ports []registry.NamedPort) {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		kv = append(kv, k+"="+l[k])
	}
	if len(kv) == 0 {
		kv = []string{"(no labels)"}
	}
	fmt.Fprintf(out, "%s\t%s\n", what, strings.Join(kv, ","))
	for _, p := range ports {
		fmt.Fprintf(out, "  port %s=%s/%d\n", p.Name, strings.ToLower(p.Protocol), p.Port)
	}
}

// labelsCmd lists every namespace's and pod's labels records.
func labelsCmd(ctx context.Context, reg *registry.Registry, show func(any, func()) error, out io.Writer) error {
	ns, pods, err := reg.AllLabels(ctx)
	if err != nil {
		return err
	}
	v := struct {
		Namespaces map[string]map[string]string  `json:"namespaces"`
		Pods       map[string]registry.PodLabels `json:"pods"`
	}{ns, pods}
	return show(v, func() {
		for _, k := range slices.Sorted(maps.Keys(ns)) {
			printLabels(out, "namespace/"+k, ns[k], nil)
		}
		for _, k := range slices.Sorted(maps.Keys(pods)) {
			printLabels(out, "pod/"+k, pods[k].Labels, pods[k].Ports)
		}
	})
}
