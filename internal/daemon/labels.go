package daemon

import (
	"maps"
	"net/netip"
	"sync"

	"github.com/gvswitch/gvs/internal/daemon/pods"
)

// labels keeps the namespace and pod labels a source reports
// (internal/daemon/source.LabelSink): what NetworkPolicy selects on. In
// Kubernetes mode they are the API server's (Namespaces, and this node's
// Pods); `gvsctl pods` shows a pod's.
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

// SetNamespaceLabels records a namespace's labels; nil forgets it.
func (d *Daemon) SetNamespaceLabels(namespace string, l map[string]string) error {
	s := &d.labels
	s.mu.Lock()
	defer s.mu.Unlock()
	if l == nil {
		delete(s.ns, namespace)
		return nil
	}
	if s.ns == nil {
		s.ns = map[string]map[string]string{}
	}
	s.ns[namespace] = maps.Clone(l)
	return nil
}

// SetPodLabels records a pod's labels and address; nil labels forget it.
func (d *Daemon) SetPodLabels(namespace, name string, ip netip.Addr, l map[string]string) error {
	s := &d.labels
	s.mu.Lock()
	defer s.mu.Unlock()
	k := podKey{namespace, name}
	if l == nil {
		delete(s.pods, k)
		return nil
	}
	if s.pods == nil {
		s.pods = map[podKey]podLabels{}
	}
	s.pods[k] = podLabels{ip: ip, labels: maps.Clone(l)}
	return nil
}

// PodView is a local pod as `gvsctl pods` shows it: the attachment, its
// labels and its namespace's, as the source last reported them.
type PodView struct {
	pods.Pod
	Labels          map[string]string `json:"labels,omitempty"`
	NamespaceLabels map[string]string `json:"namespaceLabels,omitempty"`
}

// podViews returns the local pods with their labels.
func (d *Daemon) podViews() []PodView {
	list := d.Pods()
	s := &d.labels
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
