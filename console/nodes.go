package console

import (
	"context"
	"crypto/tls"
	"net/netip"
	"sync"
	"time"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn/registry"
	"github.com/gvswitch/gvs/sdn/why"
)

// RegistryNodes reaches the nodes' read-only trace endpoints (why.Remote)
// at the addresses the registry's node records give, re-read every few
// seconds: it is the console's why.Tracer, why.PodLister and PortReader in
// the etcd mode. Its methods are safe for concurrent use.
type RegistryNodes struct {
	Reg *registry.Registry
	// TLS is gvs-master's client identity (its certificate and the
	// cluster CA), which the endpoints admit.
	TLS *tls.Config
	// Port is the endpoints' port (0: why.DefaultPort).
	Port uint16

	mu     sync.Mutex
	remote *why.Remote
	at     time.Time
}

func (n *RegistryNodes) get(ctx context.Context) (*why.Remote, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.remote != nil && time.Since(n.at) < 3*time.Second {
		return n.remote, nil
	}
	nodes, err := n.Reg.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	port := n.Port
	if port == 0 {
		port = why.DefaultPort
	}
	m := map[string]netip.AddrPort{}
	for _, nd := range nodes {
		if nd.FixedVNID == nil && nd.IP.IsValid() {
			m[nd.Name] = netip.AddrPortFrom(nd.IP, port)
		}
	}
	n.remote, n.at = &why.Remote{TLS: n.TLS, Nodes: m, Timeout: 5 * time.Second}, time.Now()
	return n.remote, nil
}

// Trace implements why.Tracer.
func (n *RegistryNodes) Trace(ctx context.Context, node, packet string) (control.TraceResult, error) {
	r, err := n.get(ctx)
	if err != nil {
		return control.TraceResult{}, err
	}
	return r.Trace(ctx, node, packet)
}

// Pods implements why.PodLister.
func (n *RegistryNodes) Pods(ctx context.Context, node string) ([]why.Pod, error) {
	r, err := n.get(ctx)
	if err != nil {
		return nil, err
	}
	return r.Pods(ctx, node)
}

// Ports implements PortReader.
func (n *RegistryNodes) Ports(ctx context.Context, node string) ([]control.Port, error) {
	r, err := n.get(ctx)
	if err != nil {
		return nil, err
	}
	return r.Ports(ctx, node)
}
