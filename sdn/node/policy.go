package node

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/netpol"
)

// The policy engine of the networkpolicy mode: the Program keeps a
// netpol.Cluster (namespaces, pods of every node, policies) beside its
// pods, and after each change recompiles the rules of the local pods the
// change can touch (netpol.Cluster.PeerNamespaces and
// NamespaceSelectorNamespaces say which), replacing a pod's rules (by
// cookie) only when they differ, all in one table update. In other modes
// these methods record nothing and install nothing.

// policyMode reports whether the Program runs the policy engine.
func (p *Program) policyMode() bool { return p.pol != nil }

// PolicyMode reports whether the Program runs the policy engine
// (networkpolicy mode).
func (p *Program) PolicyMode() bool { return p.pol != nil }

// PolicyPodKnown reports whether the policy engine knows pod
// namespace/name (SetPolicyPod). ProjectsChanged's channel is also closed
// when a pod becomes known.
func (p *Program) PolicyPodKnown(namespace, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pol == nil {
		return false
	}
	_, ok := p.pol.Pod(namespace, name)
	return ok
}

// SetPolicy records or replaces a NetworkPolicy and updates the rules of
// the local pods of its namespace. A policy the compiler refuses is an
// error and changes nothing.
func (p *Program) SetPolicy(np *networkingv1.NetworkPolicy) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.policyMode() {
		return nil
	}
	if err := p.pol.SetPolicy(np); err != nil {
		return err
	}
	return p.syncPolicy(p.localIn([]string{np.Namespace}))
}

// DeletePolicy forgets a NetworkPolicy and updates the rules of the local
// pods of its namespace.
func (p *Program) DeletePolicy(namespace, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.policyMode() {
		return nil
	}
	p.pol.DeletePolicy(namespace, name)
	return p.syncPolicy(p.localIn([]string{namespace}))
}

// SetNamespaceLabels records a namespace's labels (nil: it is gone) and
// updates the local pods whose policies select namespaces by label.
func (p *Program) SetNamespaceLabels(name string, labels map[string]string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.policyMode() {
		return nil
	}
	old, _ := p.pol.Namespace(name)
	touched := p.pol.NamespaceSelectorNamespaces(old.Labels)
	if labels == nil {
		p.pol.DeleteNamespace(name)
	} else {
		p.pol.SetNamespace(netpol.Namespace{Name: name, Labels: maps.Clone(labels), VNID: p.projects[name]})
		touched = append(touched, p.pol.NamespaceSelectorNamespaces(labels)...)
	}
	return p.syncPolicy(p.localIn(touched))
}

// SetPolicyPod records a pod of any node as policies see it (labels,
// address, named ports) and updates the local pods whose policies it is a
// peer of, before or after, and the pod itself if it is local.
func (p *Program) SetPolicyPod(pod netpol.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.policyMode() {
		return nil
	}
	var touched []string
	if old, ok := p.pol.Pod(pod.Namespace, pod.Name); ok {
		touched = p.pol.PeerNamespaces(old)
	}
	p.pol.SetPod(pod)
	close(p.changed) // wakes an attachment waiting for this pod (PolicyPodKnown)
	p.changed = make(chan struct{})
	touched = append(touched, p.pol.PeerNamespaces(pod)...)
	return p.syncPolicy(append(p.localIn(touched), p.localNamed(pod.Namespace, pod.Name)...))
}

// DeletePolicyPod forgets a pod of any node and updates the local pods
// whose policies it was a peer of.
func (p *Program) DeletePolicyPod(namespace, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.policyMode() {
		return nil
	}
	old, ok := p.pol.Pod(namespace, name)
	if !ok {
		return nil
	}
	p.pol.DeletePod(namespace, name)
	return p.syncPolicy(append(p.localIn(p.pol.PeerNamespaces(old)), p.localNamed(namespace, name)...))
}

// PoliciesOf returns the NetworkPolicies ("namespace/name") that select
// the local pod with address ip for ingress and for egress: the policies
// its rules in tables 80 and 27 are compiled from (none outside the
// networkpolicy mode, or for an address of no local pod).
func (p *Program) PoliciesOf(ip netip.Addr) (ingress, egress []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.pods[ip]
	if !ok || !p.policyMode() {
		return nil, nil
	}
	return p.pol.Selecting(p.policyPod(pod))
}

// localIn returns the addresses of the local pods of the namespaces.
func (p *Program) localIn(namespaces []string) []netip.Addr {
	var out []netip.Addr
	for ip, pod := range p.pods {
		if slices.Contains(namespaces, pod.Namespace) {
			out = append(out, ip)
		}
	}
	return out
}

// localNamed returns the address of the local pod namespace/name, if any.
func (p *Program) localNamed(namespace, name string) []netip.Addr {
	for ip, pod := range p.pods {
		if pod.Namespace == namespace && pod.Name == name {
			return []netip.Addr{ip}
		}
	}
	return nil
}

// policyPod is a local pod as the compiler sees it: its labels and named
// ports as the source reported them (none yet: no labels), its address as
// this node gave it.
func (p *Program) policyPod(pod sdn.Pod) netpol.Pod {
	pp, ok := p.pol.Pod(pod.Namespace, pod.Name)
	if !ok {
		pp = netpol.Pod{Namespace: pod.Namespace, Name: pod.Name}
	}
	pp.IP = pod.IP
	return pp
}

// policyRules compiles a local pod's rules; the text is what is installed,
// for comparing.
func (p *Program) policyRules(pod sdn.Pod) ([]*flowtable.Rule, string, error) {
	in, out, err := p.pol.PodRules(p.policyPod(pod))
	if err != nil {
		return nil, "", err
	}
	rules := append(in, out...)
	return rules, strings.Join(sdn.Text(rules), "\n"), nil
}

// syncPolicy recompiles the rules of the local pods at ips and replaces
// those that changed, in one table update.
func (p *Program) syncPolicy(ips []netip.Addr) error {
	slices.SortFunc(ips, netip.Addr.Compare)
	ips = slices.Compact(ips)
	var dels []flowtable.Filter
	var adds []*flowtable.Rule
	text := map[netip.Addr]string{}
	var errs []error
	for _, ip := range ips {
		pod, ok := p.pods[ip]
		if !ok {
			continue
		}
		rules, t, err := p.policyRules(pod)
		if err != nil {
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
			continue
		}
		if t == p.polText[ip] {
			continue
		}
		dels = append(dels, cookieFilter(sdn.IngressCookie(ip)), cookieFilter(sdn.EgressCookie(ip)))
		adds = append(adds, rules...)
		text[ip] = t
	}
	if len(dels) > 0 {
		if err := p.table.Apply(dels, adds); err != nil {
			return fmt.Errorf("policy rules: %w", err)
		}
		maps.Copy(p.polText, text)
	}
	return errors.Join(errs...)
}

// PolicyRules returns the number of NetworkPolicy rules installed for each
// local pod that has any, by address.
func (p *Program) PolicyRules() map[netip.Addr]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[netip.Addr]int{}
	for ip, t := range p.polText {
		if t != "" {
			out[ip] = strings.Count(t, "\n") + 1
		}
	}
	return out
}
