package why

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
)

// The remote trace endpoint (etcd-registry mode).
//
// Every gvs-switchd that has a node certificate of the cluster CA serves
// its traces on the node's underlay address, port DefaultPort, over TLS
// 1.3 with both ends authenticated:
//
//   - the node presents its node certificate (common name node:NAME, DNS
//     name pki.NodeServerName(NAME), server usage: gvs-master cert node
//     issues it so); the
//     client verifies it against the cluster CA and checks the common name
//     is the node it meant to reach (Remote), before its own certificate
//     is sent;
//   - the client must present a certificate of the same CA that Allowed
//     admits: gvs-master's or an administrator's.
//     A node's certificate, another CA's, or none at all ends the
//     handshake (ServerConfig): a tenant pod or an underlay host that
//     connects gets nothing.
//   - the endpoint answers only the read-only commands of ReadOnly
//     ("trace", "pods", "dump-ports": the ports' counters, for the console);
//     every other command is refused.
//
// In Kubernetes mode the same endpoint serves with a certificate of a gvs
// cluster CA the operator gives each node as files (gvs-master cert node,
// the daemon's traceTLS), and NodesOfHostSubnets finds the nodes.
//
// What is not done: a Kubernetes-native identity for the endpoint (each
// node's serving certificate from the CSR API, clients authenticated by
// delegated authentication and authorized with a SubjectAccessReview:
// docs/security.md), administrators' certificates issued before they
// carried pki.AdminOrganization (refused, which fails closed: issue them
// again), and revocation of a stolen administrator certificate before it
// expires (the CA has no CRL).

// DefaultPort is the TCP port of a node's trace endpoint.
const DefaultPort = 9447

// Errors of the remote trace endpoint.
var (
	// ErrUnknownNode: Remote has no address for the node.
	ErrUnknownNode = errors.New("why: unknown node")
	// ErrNotAllowed: the client's identity may not use a trace endpoint.
	ErrNotAllowed = errors.New("why: identity not allowed to trace")
	// ErrNotServing: the node's certificate cannot serve TLS (issued
	// before gvs-master cert node gave nodes a serving certificate).
	ErrNotServing = errors.New("why: the node certificate is not a serving certificate (re-issue it with gvs-master cert node)")
)

// Allowed reports whether the client with certificate c (verified
// against the cluster CA) may use a node's trace endpoint: gvs-master,
// the administrator (pki.AdminUser) and the administrators gvs-master cert
// admin issues (organization pki.AdminOrganization). Nodes, whatever
// their certificate says, and every other identity may not.
func Allowed(c *x509.Certificate) bool {
	cn := c.Subject.CommonName
	if _, node := pki.NodeOf(cn); node || cn == "" {
		return false
	}
	return cn == pki.AdminUser || cn == pki.MasterUser || slices.Contains(c.Subject.Organization, pki.AdminOrganization)
}

// ReadOnly lists the control commands a trace endpoint answers.
var ReadOnly = []string{"trace", "pods", "dump-ports"}

// Handler wraps a control handler (the daemon's) so that it answers only
// the commands of ReadOnly.
func Handler(h control.Handler) control.Handler {
	return func(ctx context.Context, req control.Request) (any, error) {
		if !slices.Contains(ReadOnly, req.Command) {
			return nil, fmt.Errorf("%w: %q is not answered on the trace endpoint (read-only: %v)", control.ErrUnknownCommand, req.Command, ReadOnly)
		}
		return h(ctx, req)
	}
}

// ServerConfig returns the TLS configuration of a node's trace endpoint:
// it presents f's certificate (re-read when the files are replaced),
// requires a client certificate issued by f's CA, and ends the handshake
// of any client whose identity Allowed refuses. It fails with
// ErrNotServing when f's certificate has no server usage. Refusals are
// logged at warning level when log is not nil.
func ServerConfig(f pki.Files, log *slog.Logger) (*tls.Config, error) {
	// pki.Client re-reads the key pair when the files change; its
	// GetClientCertificate ignores its argument and returns that pair,
	// which the server presents as well.
	id, err := f.NewClient()
	if err != nil {
		return nil, err
	}
	kp, err := id.Config.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil {
		return nil, err
	}
	if kp.Leaf == nil || !slices.ContainsFunc(kp.Leaf.ExtKeyUsage, func(u x509.ExtKeyUsage) bool {
		return u == x509.ExtKeyUsageServerAuth || u == x509.ExtKeyUsageAny
	}) {
		return nil, ErrNotServing
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  id.Config.RootCAs,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return id.Config.GetClientCertificate(&tls.CertificateRequestInfo{})
		},
		// Called after the chain is verified against ClientCAs.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: no client certificate", ErrNotAllowed)
			}
			if c := cs.PeerCertificates[0]; !Allowed(c) {
				who := c.Subject.CommonName
				if log != nil {
					log.Warn("trace endpoint: refused a client", "identity", who)
				}
				return fmt.Errorf("%w: %q", ErrNotAllowed, who)
			}
			return nil
		},
	}, nil
}

// Remote is the Tracer and PodLister of the etcd-registry mode: it calls
// the nodes' trace endpoints. Its methods are safe for concurrent use.
type Remote struct {
	// TLS is the client's identity: the administrator's or gvs-master's
	// certificate and the cluster CA (pki.Files.ClientConfig).
	TLS *tls.Config
	// Nodes maps node names to their trace endpoints (underlay address,
	// DefaultPort).
	Nodes map[string]netip.AddrPort
	// Timeout bounds one call (connection, handshake, answer) when ctx
	// has no earlier deadline; 0 means 10 seconds.
	Timeout time.Duration
	// Dial, when set, opens the connection to an endpoint instead of TCP
	// (tests use in-memory pipes); TLS runs over what it returns.
	Dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)

	// sessions resumes TLS sessions (per node name) when r.TLS has no
	// cache of its own: a matrix makes two calls per pair.
	once     sync.Once
	sessions tls.ClientSessionCache
}

// NodesOfHostSubnets maps the HostSubnets of a Kubernetes cluster to
// their nodes' trace endpoints (HostIP, port), leaving out the hosts that
// are not nodes (a fixed-vnid-host annotation, valid or not) and those
// without an address: Remote.Nodes in Kubernetes mode, where the nodes
// serve their endpoints with a certificate of the gvs cluster CA given to
// them as files (traceTLS).
func NodesOfHostSubnets(hss []networkv1.HostSubnet, port uint16) map[string]netip.AddrPort {
	if port == 0 {
		port = DefaultPort
	}
	m := map[string]netip.AddrPort{}
	for i := range hss {
		hs := &hss[i]
		if _, host, _ := networkv1.FixedVNID(hs); host {
			continue
		}
		ip, err := netip.ParseAddr(hs.HostIP)
		if err != nil {
			continue
		}
		m[hs.Name] = netip.AddrPortFrom(ip, port)
	}
	return m
}

// NodesOf maps the registry's nodes to their trace endpoints (their
// underlay address, port), leaving out the hosts that are not nodes (they
// run no gvs-switchd): Remote.Nodes for gvsctl why and gvs-master.
func NodesOf(nodes []registry.Node, port uint16) map[string]netip.AddrPort {
	if port == 0 {
		port = DefaultPort
	}
	m := map[string]netip.AddrPort{}
	for _, n := range nodes {
		if n.FixedVNID != nil || !n.IP.IsValid() {
			continue
		}
		m[n.Name] = netip.AddrPortFrom(n.IP, port)
	}
	return m
}

// Trace runs packet on node through its trace endpoint (Tracer).
func (r *Remote) Trace(ctx context.Context, node, packet string) (control.TraceResult, error) {
	var res control.TraceResult
	err := r.call(ctx, node, control.Request{Command: "trace", Args: packet}, &res)
	return res, err
}

// Pods lists node's pods through its trace endpoint (PodLister).
func (r *Remote) Pods(ctx context.Context, node string) ([]Pod, error) {
	var res []struct {
		Name    string     `json:"name"`
		Project string     `json:"project"`
		IP      netip.Addr `json:"ip"`
		MAC     string     `json:"mac"`
		Port    uint32     `json:"port"`
		VNID    uint32     `json:"vnid"`
	}
	if err := r.call(ctx, node, control.Request{Command: "pods"}, &res); err != nil {
		return nil, err
	}
	out := make([]Pod, 0, len(res))
	for _, p := range res {
		out = append(out, Pod{Namespace: p.Project, Name: p.Name, Node: node, IP: p.IP, MAC: p.MAC, Port: p.Port, VNID: p.VNID})
	}
	return out, nil
}

// refused explains an error after the handshake. In TLS 1.3 the server
// checks the client's certificate after the client has finished its
// side of the handshake, so a refusal shows as a failed write or read;
// the server's alert, if it can still be read, says more.
func refused(node string, c *tls.Conn, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("why: node %s did not answer in time: %w", node, err)
	}
	if _, rerr := c.Read(make([]byte, 1)); rerr != nil && strings.Contains(rerr.Error(), "remote error") {
		err = rerr
	}
	return fmt.Errorf("why: node %s refused the request or closed the connection (its trace endpoint admits only the administrator's and gvs-master's certificates): %w", node, err)
}

// clientConfig is r.TLS for a connection to node: TLS 1.3 (the client's
// certificate goes out only after the server's is verified), the server
// name pki.NodeServerName(node) (its certificate's DNS name), and the
// common name checked to
// be that node's identity, so that another certificate of the CA (another
// node's, etcd's) cannot stand in for it.
func (r *Remote) clientConfig(node string) (*tls.Config, error) {
	if r.TLS == nil || r.TLS.RootCAs == nil {
		return nil, errors.New("why: Remote needs a TLS client identity trusting the cluster CA")
	}
	c := r.TLS.Clone()
	if c.ClientSessionCache == nil {
		r.once.Do(func() { r.sessions = tls.NewLRUClientSessionCache(256) })
		c.ClientSessionCache = r.sessions
	}
	c.MinVersion = tls.VersionTLS13
	c.ServerName = pki.NodeServerName(node)
	c.InsecureSkipVerify = false
	want := pki.NodeUser(node)
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != want {
			return fmt.Errorf("why: the trace endpoint of node %s is not %s", node, want)
		}
		return nil
	}
	return c, nil
}

func (r *Remote) call(ctx context.Context, node string, req control.Request, out any) error {
	addr, ok := r.Nodes[node]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownNode, node)
	}
	cfg, err := r.clientConfig(node)
	if err != nil {
		return err
	}
	to := r.Timeout
	if to == 0 {
		to = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	var raw net.Conn
	if r.Dial != nil {
		raw, err = r.Dial(ctx, addr)
	} else {
		var d net.Dialer
		raw, err = d.DialContext(ctx, "tcp", addr.String())
	}
	if err != nil {
		return fmt.Errorf("why: node %s (%s): %w", node, addr, err)
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("why: node %s (%s): %w", node, addr, err)
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return refused(node, c, err)
	}
	var resp control.Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return refused(node, c, err)
	}
	if resp.Error != "" {
		return fmt.Errorf("why: node %s: %s", node, resp.Error)
	}
	if out != nil && resp.Result != nil {
		if err := json.Unmarshal(resp.Result, out); err != nil {
			return fmt.Errorf("why: node %s: decoding result: %w", node, err)
		}
	}
	return nil
}
