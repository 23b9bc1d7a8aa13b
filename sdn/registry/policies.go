package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gvswitch/gvs/sdn/netpol"
)

// The networkpolicy mode's state in the etcd registry, where no API server
// holds NetworkPolicies and labels. An administrator writes policies and
// labels (gvsctl policy, gvsctl label); each node publishes the addresses
// of its own pods, so that a policy selecting a pod by its labels finds its
// address on every node. Every node reads all of it.
const (
	// PoliciesPrefix+namespace+"/"+name → a networking.k8s.io/v1
	// NetworkPolicy (JSON), written by an administrator.
	PoliciesPrefix = Prefix + "policies/"
	// NamespaceLabelsPrefix+namespace → Labels, written by an
	// administrator.
	NamespaceLabelsPrefix = Prefix + "namespace-labels/"
	// PodLabelsPrefix+namespace+"/"+name → PodLabels, written by an
	// administrator.
	PodLabelsPrefix = Prefix + "pod-labels/"
	// PodsPrefix+node+"/"+namespace+"/"+name → PodAddress, written by
	// the node the pod runs on, on its lease. A node may write only under
	// its own name, and the others believe an address only inside the
	// writer's subnet (which gvs-master gives).
	PodsPrefix = Prefix + "pods/"
)

// MetadataNameLabel is the label the API server gives every namespace, its
// name; the registry's namespaces carry it too, so that policies written
// for Kubernetes select them the same way.
const MetadataNameLabel = "kubernetes.io/metadata.name"

// Labels is a namespace's labels record.
type Labels struct {
	Labels map[string]string `json:"labels"`
}

// PodLabels is a pod's labels record: its labels and the named ports its
// containers would declare (policies may name ports).
type PodLabels struct {
	Labels map[string]string `json:"labels"`
	Ports  []NamedPort       `json:"ports,omitempty"`
}

// NamedPort is a named container port.
type NamedPort struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol,omitempty"` // TCP (default), UDP, SCTP
	Port     uint16 `json:"port"`
}

// PodAddress is a pod's address record, published by its node.
type PodAddress struct {
	IP netip.Addr `json:"ip"`
}

// PolicyKey is the key of NetworkPolicy name in namespace.
func PolicyKey(namespace, name string) string { return PoliciesPrefix + namespace + "/" + name }

// NamespaceLabelsKey is the key of a namespace's labels.
func NamespaceLabelsKey(namespace string) string { return NamespaceLabelsPrefix + namespace }

// PodLabelsKey is the key of a pod's labels.
func PodLabelsKey(namespace, name string) string {
	return PodLabelsPrefix + namespace + "/" + name
}

// PodKey is the key of a pod's address record on node.
func PodKey(node, namespace, name string) string {
	return PodsPrefix + node + "/" + namespace + "/" + name
}

// ParseNamespacedKey splits a key prefix+namespace+"/"+name.
func ParseNamespacedKey(prefix, key string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, "/")
	return namespace, name, ok && namespace != "" && name != "" && !strings.Contains(name, "/")
}

// ParsePodKey splits a PodsPrefix key into node, namespace and name.
func ParsePodKey(key string) (node, namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, PodsPrefix)
	if !ok {
		return "", "", "", false
	}
	node, rest, ok = strings.Cut(rest, "/")
	if !ok || node == "" {
		return "", "", "", false
	}
	namespace, name, ok = ParseNamespacedKey("", rest)
	return node, namespace, name, ok
}

// validName reports whether s can be a pod or policy name: a DNS
// subdomain, as Kubernetes requires.
func validName(s string) bool { return len(validation.IsDNS1123Subdomain(s)) == 0 }

// ValidateLabels checks label keys and values as Kubernetes does.
func ValidateLabels(l map[string]string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(l)) {
		for _, e := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Errorf("label key %q: %s", k, e))
		}
		for _, e := range validation.IsValidLabelValue(l[k]) {
			errs = append(errs, fmt.Errorf("label %s value %q: %s", k, l[k], e))
		}
	}
	return errors.Join(errs...)
}

// NetpolPorts returns the record's named ports as the policy compiler
// takes them.
func (p PodLabels) NetpolPorts() ([]netpol.NamedPort, error) {
	out := make([]netpol.NamedPort, 0, len(p.Ports))
	for _, np := range p.Ports {
		if errs := validation.IsValidPortName(np.Name); len(errs) > 0 {
			return nil, fmt.Errorf("port name %q: %s", np.Name, strings.Join(errs, "; "))
		}
		if np.Port == 0 {
			return nil, fmt.Errorf("port %s: number 0", np.Name)
		}
		proto := strings.ToUpper(np.Protocol)
		if proto == "" {
			proto = "TCP"
		}
		if _, err := ParseProtocol(proto); err != nil {
			return nil, fmt.Errorf("port %s: %w", np.Name, err)
		}
		out = append(out, netpol.NamedPort{Name: np.Name, Protocol: corev1.Protocol(proto), Port: np.Port})
	}
	return out, nil
}

// ValidatePolicy checks a NetworkPolicy before it is stored: its names,
// and that the policy compiler takes it (what a node would refuse is
// refused here, where the administrator sees the error).
func ValidatePolicy(np *networkingv1.NetworkPolicy) error {
	if np == nil {
		return errors.New("no policy")
	}
	if !validNamePart(np.Namespace) {
		return fmt.Errorf("policy %q: namespace %q is not a DNS label", np.Name, np.Namespace)
	}
	if !validName(np.Name) {
		return fmt.Errorf("policy %s/%q: the name is not a DNS subdomain", np.Namespace, np.Name)
	}
	c := netpol.NewCluster()
	if err := c.SetPolicy(np); err != nil {
		return fmt.Errorf("policy %s/%s: %w", np.Namespace, np.Name, err)
	}
	return nil
}

// storedPolicy is the part of a NetworkPolicy the registry keeps: its
// identity and spec (no status, no server-side metadata).
func storedPolicy(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
	out := &networkingv1.NetworkPolicy{Spec: *np.Spec.DeepCopy()}
	out.APIVersion, out.Kind = "networking.k8s.io/v1", "NetworkPolicy"
	out.Name, out.Namespace = np.Name, np.Namespace
	out.Labels, out.Annotations = np.Labels, np.Annotations
	return out
}

// SetPolicy validates and stores a NetworkPolicy (created or replaced).
func (r *Registry) SetPolicy(ctx context.Context, np *networkingv1.NetworkPolicy) error {
	if err := ValidatePolicy(np); err != nil {
		return err
	}
	b, err := json.Marshal(storedPolicy(np))
	if err != nil {
		return err
	}
	if _, err := r.c.Put(ctx, PolicyKey(np.Namespace, np.Name), string(b)); err != nil {
		return fmt.Errorf("policy %s/%s: %w", np.Namespace, np.Name, err)
	}
	return nil
}

// DeletePolicy deletes a NetworkPolicy; it reports whether one was there.
func (r *Registry) DeletePolicy(ctx context.Context, namespace, name string) (bool, error) {
	resp, err := r.c.Delete(ctx, PolicyKey(namespace, name))
	if err != nil {
		return false, fmt.Errorf("policy %s/%s: %w", namespace, name, err)
	}
	return resp.Deleted > 0, nil
}

// DecodePolicy decodes a stored NetworkPolicy and checks that it is stored
// under its own name.
func DecodePolicy(key string, val []byte) (*networkingv1.NetworkPolicy, error) {
	ns, name, ok := ParseNamespacedKey(PoliciesPrefix, key)
	if !ok {
		return nil, fmt.Errorf("%s: not a policy key", key)
	}
	np := &networkingv1.NetworkPolicy{}
	if err := json.Unmarshal(val, np); err != nil {
		return nil, fmt.Errorf("policy %s/%s: %w", ns, name, err)
	}
	if np.Namespace != ns || np.Name != name {
		return nil, fmt.Errorf("policy %s/%s: the record names %s/%s", ns, name, np.Namespace, np.Name)
	}
	return np, nil
}

// Policies returns the NetworkPolicies of namespace ("" : all), sorted by
// namespace and name.
func (r *Registry) Policies(ctx context.Context, namespace string) ([]*networkingv1.NetworkPolicy, error) {
	prefix := PoliciesPrefix
	if namespace != "" {
		prefix += namespace + "/"
	}
	resp, err := r.c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list policies: %w", err)
	}
	out := make([]*networkingv1.NetworkPolicy, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs { // etcd returns keys sorted
		np, err := DecodePolicy(string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, np)
	}
	return out, nil
}

// EditLabels applies set (key → value) and remove (keys) to labels,
// returning the result; it refuses invalid labels.
func EditLabels(labels map[string]string, set map[string]string, remove []string) (map[string]string, error) {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range remove {
		delete(out, k)
	}
	maps.Copy(out, set)
	return out, ValidateLabels(out)
}

// NamespaceLabels returns a namespace's labels as the registry keeps them
// (without MetadataNameLabel, which nodes add); nil if it has no record.
func (r *Registry) NamespaceLabels(ctx context.Context, namespace string) (map[string]string, error) {
	resp, err := r.c.Get(ctx, NamespaceLabelsKey(namespace))
	if err != nil {
		return nil, fmt.Errorf("namespace %s labels: %w", namespace, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var l Labels
	if err := json.Unmarshal(resp.Kvs[0].Value, &l); err != nil {
		return nil, fmt.Errorf("namespace %s labels: %w", namespace, err)
	}
	return l.Labels, nil
}

// SetNamespaceLabels replaces a namespace's labels (an empty set deletes
// the record). MetadataNameLabel is the namespace's name and cannot be set
// otherwise.
func (r *Registry) SetNamespaceLabels(ctx context.Context, namespace string, labels map[string]string) error {
	if !validNamePart(namespace) {
		return fmt.Errorf("namespace %q is not a DNS label", namespace)
	}
	if v, ok := labels[MetadataNameLabel]; ok && v != namespace {
		return fmt.Errorf("namespace %s: label %s is the namespace's name", namespace, MetadataNameLabel)
	}
	if err := ValidateLabels(labels); err != nil {
		return fmt.Errorf("namespace %s: %w", namespace, err)
	}
	var err error
	if len(labels) == 0 {
		_, err = r.c.Delete(ctx, NamespaceLabelsKey(namespace))
	} else {
		_, err = r.c.Put(ctx, NamespaceLabelsKey(namespace), jsonOf(Labels{Labels: labels}))
	}
	if err != nil {
		return fmt.Errorf("namespace %s labels: %w", namespace, err)
	}
	return nil
}

// PodLabels returns a pod's labels record (the zero record if it has
// none).
func (r *Registry) PodLabels(ctx context.Context, namespace, name string) (PodLabels, error) {
	var p PodLabels
	resp, err := r.c.Get(ctx, PodLabelsKey(namespace, name))
	if err != nil {
		return p, fmt.Errorf("pod %s/%s labels: %w", namespace, name, err)
	}
	if len(resp.Kvs) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return p, fmt.Errorf("pod %s/%s labels: %w", namespace, name, err)
	}
	return p, nil
}

// SetPodLabels replaces a pod's labels record (an empty one deletes it).
func (r *Registry) SetPodLabels(ctx context.Context, namespace, name string, p PodLabels) error {
	if !validNamePart(namespace) || !validName(name) {
		return fmt.Errorf("pod %s/%s: the namespace must be a DNS label and the name a DNS subdomain", namespace, name)
	}
	if err := ValidateLabels(p.Labels); err != nil {
		return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	if _, err := p.NetpolPorts(); err != nil {
		return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	var err error
	if len(p.Labels) == 0 && len(p.Ports) == 0 {
		_, err = r.c.Delete(ctx, PodLabelsKey(namespace, name))
	} else {
		_, err = r.c.Put(ctx, PodLabelsKey(namespace, name), jsonOf(p))
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s labels: %w", namespace, name, err)
	}
	return nil
}

// AllLabels returns every namespace's and every pod's labels record (by
// namespace, and by namespace/name).
func (r *Registry) AllLabels(ctx context.Context) (map[string]map[string]string, map[string]PodLabels, error) {
	resp, err := r.c.Txn(ctx).Then(
		clientv3.OpGet(NamespaceLabelsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(PodLabelsPrefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("list labels: %w", err)
	}
	ns := map[string]map[string]string{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var l Labels
		if err := json.Unmarshal(kv.Value, &l); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		ns[strings.TrimPrefix(string(kv.Key), NamespaceLabelsPrefix)] = l.Labels
	}
	pods := map[string]PodLabels{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		ns, name, ok := ParseNamespacedKey(PodLabelsPrefix, string(kv.Key))
		if !ok {
			continue
		}
		var p PodLabels
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		pods[ns+"/"+name] = p
	}
	return ns, pods, nil
}

// PublishPods makes node's pod address records (PodsPrefix+node+"/") what
// want says (by namespace/name), on lease: it writes what is missing or
// different and deletes the rest. A node's credentials may write only
// these.
func (r *Registry) PublishPods(ctx context.Context, node string, lease clientv3.LeaseID, want map[string]netip.Addr) error {
	prefix := PodsPrefix + node + "/"
	resp, err := r.c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("list published pods: %w", err)
	}
	have := map[string]bool{}
	var errs []error
	for _, kv := range resp.Kvs {
		_, ns, name, ok := ParsePodKey(string(kv.Key))
		var a PodAddress
		if ok && json.Unmarshal(kv.Value, &a) == nil && a.IP == want[ns+"/"+name] && kv.Lease == int64(lease) {
			have[ns+"/"+name] = true
			continue
		}
		if _, err := r.c.Delete(ctx, string(kv.Key)); err != nil {
			errs = append(errs, fmt.Errorf("unpublish %s: %w", kv.Key, err))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if have[k] {
			continue
		}
		ns, name, _ := strings.Cut(k, "/")
		var opts []clientv3.OpOption
		if lease != 0 {
			opts = append(opts, clientv3.WithLease(lease))
		}
		if _, err := r.c.Put(ctx, PodKey(node, ns, name), jsonOf(PodAddress{IP: want[k]}), opts...); err != nil {
			errs = append(errs, fmt.Errorf("publish pod %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}
