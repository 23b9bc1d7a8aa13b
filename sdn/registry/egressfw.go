package registry

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// EgressFirewallsPrefix+namespace+"/"+name → an OpenShift
// EgressNetworkPolicy (network.openshift.io/v1, JSON): a project's egress
// firewall in the etcd-registry mode, written by an administrator (gvsctl
// egress-firewall), read by every node for table 100. In the Kubernetes
// mode the API server's objects take its place.
const EgressFirewallsPrefix = Prefix + "egress-firewalls/"

// EgressFirewallKey is the key of egress firewall name in namespace.
func EgressFirewallKey(namespace, name string) string {
	return EgressFirewallsPrefix + namespace + "/" + name
}

// SetEgressFirewall stores an egress firewall (created or replaced). Its
// names are checked here; its rules by the caller (gvsctl checks them as
// the nodes read them) — a node that cannot read one denies the project's
// egress until it is fixed.
func (r *Registry) SetEgressFirewall(ctx context.Context, np *networkv1.EgressNetworkPolicy) error {
	if !validNamePart(np.Namespace) || !validName(np.Name) {
		return fmt.Errorf("egress firewall %s/%s: the namespace must be a DNS label and the name a DNS subdomain", np.Namespace, np.Name)
	}
	out := &networkv1.EgressNetworkPolicy{Spec: np.Spec}
	out.APIVersion, out.Kind = networkv1.GroupVersion().String(), "EgressNetworkPolicy"
	out.Name, out.Namespace, out.Labels, out.Annotations = np.Name, np.Namespace, np.Labels, np.Annotations
	if _, err := r.c.Put(ctx, EgressFirewallKey(np.Namespace, np.Name), jsonOf(out)); err != nil {
		return fmt.Errorf("egress firewall %s/%s: %w", np.Namespace, np.Name, err)
	}
	return nil
}

// DeleteEgressFirewall deletes an egress firewall; it reports whether one
// was there.
func (r *Registry) DeleteEgressFirewall(ctx context.Context, namespace, name string) (bool, error) {
	resp, err := r.c.Delete(ctx, EgressFirewallKey(namespace, name))
	if err != nil {
		return false, fmt.Errorf("egress firewall %s/%s: %w", namespace, name, err)
	}
	return resp.Deleted > 0, nil
}

// DecodeEgressFirewall decodes a stored egress firewall and checks that it
// is stored under its own name.
func DecodeEgressFirewall(key string, val []byte) (*networkv1.EgressNetworkPolicy, error) {
	ns, name, ok := ParseNamespacedKey(EgressFirewallsPrefix, key)
	if !ok {
		return nil, fmt.Errorf("%s: not an egress firewall key", key)
	}
	np := &networkv1.EgressNetworkPolicy{}
	if err := json.Unmarshal(val, np); err != nil {
		return nil, fmt.Errorf("egress firewall %s/%s: %w", ns, name, err)
	}
	if np.Namespace != ns || np.Name != name {
		return nil, fmt.Errorf("egress firewall %s/%s: the record names %s/%s", ns, name, np.Namespace, np.Name)
	}
	return np, nil
}

// EgressFirewalls returns the egress firewalls of namespace ("": all),
// sorted by namespace and name.
func (r *Registry) EgressFirewalls(ctx context.Context, namespace string) ([]*networkv1.EgressNetworkPolicy, error) {
	prefix := EgressFirewallsPrefix
	if namespace != "" {
		prefix += namespace + "/"
	}
	resp, err := r.c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list egress firewalls: %w", err)
	}
	out := make([]*networkv1.EgressNetworkPolicy, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		np, err := DecodeEgressFirewall(string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, np)
	}
	return out, nil
}
