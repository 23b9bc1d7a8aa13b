package daemon

import (
	"maps"
	"net/netip"
	"sync"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gvswitch/gvs/internal/daemon/pods"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn/netpol"
)

// labels keeps the namespace and pod labels a source reports
// (internal/daemon/source.LabelSink): what NetworkPolicy selects on. In
// Kubernetes mode they are the API server's (Namespaces, and this node's
// Pods, or every node's in networkpolicy mode); `gvsctl pods` shows a local
// pod's. The rule program's policy engine keeps its own copy.
type labels struct {
	mu   sync.Mutex
	ns   map[string]map[string]string
	pods map[podKey]podLabels
}

type podKey struct{ namespace, name string }

type podLabels struct {
	ip     netip.Addr
	labels map[string]string
}

// SetNamespaceLabels records a namespace's labels (nil forgets it) and
// hands them to the rule program's policy engine (networkpolicy mode).
func (n *nodeState) SetNamespaceLabels(namespace string, l map[string]string) error {
	s := &n.labels
	s.mu.Lock()
	if l == nil {
		delete(s.ns, namespace)
	} else {
		if s.ns == nil {
			s.ns = map[string]map[string]string{}
		}
		s.ns[namespace] = maps.Clone(l)
	}
	s.mu.Unlock()
	return n.prog.SetNamespaceLabels(namespace, l)
}

// SetPod records a pod's labels and address and hands the pod to the
// policy engine.
func (n *nodeState) SetPod(p source.Pod) error {
	s := &n.labels
	s.mu.Lock()
	if s.pods == nil {
		s.pods = map[podKey]podLabels{}
	}
	s.pods[podKey{p.Namespace, p.Name}] = podLabels{ip: p.IP, labels: maps.Clone(p.Labels)}
	s.mu.Unlock()
	return n.prog.SetPolicyPod(netpol.Pod{Namespace: p.Namespace, Name: p.Name, IP: p.IP, Labels: maps.Clone(p.Labels), Ports: p.Ports})
}

// DeletePod forgets a pod.
func (n *nodeState) DeletePod(namespace, name string) error {
	s := &n.labels
	s.mu.Lock()
	delete(s.pods, podKey{namespace, name})
	s.mu.Unlock()
	return n.prog.DeletePolicyPod(namespace, name)
}

// SetPolicy installs or replaces a NetworkPolicy (source.PolicySink).
func (n *nodeState) SetPolicy(np *networkingv1.NetworkPolicy) error { return n.prog.SetPolicy(np) }

// DeletePolicy removes a NetworkPolicy.
func (n *nodeState) DeletePolicy(namespace, name string) error {
	return n.prog.DeletePolicy(namespace, name)
}

// PodView is a local pod as `gvsctl pods` shows it: the attachment, its
// labels and its namespace's, as the source last reported them.
type PodView struct {
	pods.Pod
	Labels          map[string]string `json:"labels,omitempty"`
	NamespaceLabels map[string]string `json:"namespaceLabels,omitempty"`
}

// podViews returns the local pods with their labels.
func (n *nodeState) podViews() []PodView {
	list := n.pods.List()
	s := &n.labels
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PodView, 0, len(list))
	for _, p := range list {
		v := PodView{Pod: p, NamespaceLabels: maps.Clone(s.ns[p.Project])}
		if pl, ok := s.pods[podKey{p.Project, p.Name}]; ok {
			v.Labels = maps.Clone(pl.labels)
		}
		out = append(out, v)
	}
	return out
}
