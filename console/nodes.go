package console

import (
	"context"
	"crypto/tls"
	"net/netip"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/sdn/why"
)

// TraceNodes reaches the nodes' read-only trace endpoints (why.Remote) at
// the addresses Find gives, asked again every few seconds: it is the
// console's why.Tracer, why.PodLister and PortReader. Its methods are safe
// for concurrent use.
type TraceNodes struct {
	// TLS is gvs-master's client identity (its certificate and the
	// cluster CA), which the endpoints admit.
	TLS *tls.Config
	// Find returns the nodes' endpoints: RegistryEndpoints or
	// KubeEndpoints.
	Find func(ctx context.Context) (map[string]netip.AddrPort, error)

	mu     sync.Mutex
	remote *why.Remote
	at     time.Time
}

// RegistryEndpoints finds the nodes in the registry's node records (the
// etcd mode).
func RegistryEndpoints(reg *registry.Registry) func(context.Context) (map[string]netip.AddrPort, error) {
	return func(ctx context.Context) (map[string]netip.AddrPort, error) {
		nodes, err := reg.Nodes(ctx)
		if err != nil {
			return nil, err
		}
		return why.NodesOf(nodes, why.DefaultPort), nil
	}
}

// KubeEndpoints finds the nodes in the HostSubnets (the Kubernetes mode,
// where nodes serve their endpoint with a certificate of the gvs cluster
// CA given to them as files).
func KubeEndpoints(nc *networkv1.Client) func(context.Context) (map[string]netip.AddrPort, error) {
	return func(ctx context.Context) (map[string]netip.AddrPort, error) {
		hs, err := nc.HostSubnets().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return why.NodesOfHostSubnets(hs.Items, why.DefaultPort), nil
	}
}

func (n *TraceNodes) get(ctx context.Context) (*why.Remote, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.remote != nil && time.Since(n.at) < 3*time.Second {
		return n.remote, nil
	}
	m, err := n.Find(ctx)
	if err != nil {
		return nil, err
	}
	n.remote, n.at = &why.Remote{TLS: n.TLS, Nodes: m, Timeout: 5 * time.Second}, time.Now()
	return n.remote, nil
}

// Trace implements why.Tracer.
func (n *TraceNodes) Trace(ctx context.Context, node, packet string) (control.TraceResult, error) {
	r, err := n.get(ctx)
	if err != nil {
		return control.TraceResult{}, err
	}
	return r.Trace(ctx, node, packet)
}

// Pods implements why.PodLister.
func (n *TraceNodes) Pods(ctx context.Context, node string) ([]why.Pod, error) {
	r, err := n.get(ctx)
	if err != nil {
		return nil, err
	}
	return r.Pods(ctx, node)
}

// Ports implements PortReader.
func (n *TraceNodes) Ports(ctx context.Context, node string) ([]control.Port, error) {
	r, err := n.get(ctx)
	if err != nil {
		return nil, err
	}
	return r.Ports(ctx, node)
}
