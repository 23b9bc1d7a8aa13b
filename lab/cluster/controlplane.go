package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/pki"
)

// Control planes of Spec.ControlPlane. Both run in the first node's
// namespace, reachable from every node on the underlay.
const (
	// ControlPlaneEmbedded runs gvs-master with its embedded etcd.
	ControlPlaneEmbedded = "embedded"
	// ControlPlaneExternal runs a 3-member cluster of Debian's etcd
	// (EtcdBinary) and gvs-master against it.
	ControlPlaneExternal = "external"
)

// EtcdBinary is the etcd server the external control plane runs.
const EtcdBinary = "/usr/bin/etcd"

// EtcdMember is one member of the external etcd cluster.
type EtcdMember struct {
	Name      string
	ClientURL string
	args      []string
	proc      *lab.Proc
	c         *Cluster
}

// allocatedSubnet is the i-th subnet gvs-master hands out (nodes register
// one at a time, in order).
func (s *Spec) allocatedSubnet(i int) netip.Prefix {
	sa, err := master.NewSubnetAllocator([]master.ClusterNetwork{{CIDR: s.ClusterNetwork, HostSubnetLength: s.HostSubnetBits}})
	if err != nil {
		return netip.Prefix{}
	}
	var p netip.Prefix
	for range i + 1 {
		if p, err = sa.Allocate(); err != nil {
			return netip.Prefix{}
		}
	}
	return p
}

// upControlPlane starts etcd (external) and gvs-master in the first node's
// namespace, waits until the registry answers and creates the projects of
// Spec.VNIDs (in VNID order, joining projects that share a VNID), then
// records the VNIDs the registry gave the pods.
func (c *Cluster) upControlPlane(ctx context.Context) error {
	for i := range c.Nodes {
		if c.Spec.dataplane(i) != DataplaneGVS {
			return errors.New("cluster: the control plane needs gvs on every node")
		}
	}
	if c.Spec.ControlPlane == ControlPlaneKube {
		return c.upKube(ctx)
	}
	n0 := c.Nodes[0]
	dir := c.Lab.StateDir()
	ttl := c.Spec.NodeLeaseTTL
	if ttl == 0 {
		ttl = 5
	}
	args := []string{filepath.Join(c.Spec.BinDir, "gvs-master"),
		"--mode", c.Spec.Mode,
		"--cluster-network", fmt.Sprintf("%s:%d", c.Spec.ClusterNetwork, c.Spec.HostSubnetBits),
		"--service-network", c.Spec.ServiceNetwork.String(),
		"--node-lease-ttl", strconv.Itoa(ttl)}
	switch c.Spec.ControlPlane {
	case ControlPlaneEmbedded:
		c.EtcdEndpoints = []string{fmt.Sprintf("https://%s:2379", n0.IP)}
		args = append(args, "--data-dir", c.masterDir(),
			"--listen-client", c.EtcdEndpoints[0], "--listen-peer", "https://127.0.0.1:2380")
	case ControlPlaneExternal:
		if err := c.startEtcd(ctx, 3); err != nil {
			return err
		}
		args = append(args, "--data-dir", c.masterDir(), "--etcd-endpoints", strings.Join(c.EtcdEndpoints, ","))
	default:
		return fmt.Errorf("cluster: unknown control plane %q", c.Spec.ControlPlane)
	}
	c.masterArgs = append(args, c.Spec.MasterArgs...)
	if err := c.StartMaster(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.Projects(ctx, "list")
		if err == nil {
			break
		}
		if c.Master.Exited() || time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "master.log"))
			return fmt.Errorf("cluster: gvs-master did not come up: %v\n--- its log ---\n%s", err, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.issueNodeCerts(ctx); err != nil {
		return err
	}
	// Projects, grouped by wanted VNID.
	groups := map[uint32][]string{}
	for p, v := range c.Spec.VNIDs {
		if p != master.DefaultProject {
			groups[v] = append(groups[v], p)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(groups)) {
		ps := groups[v]
		slices.Sort(ps)
		if _, err := c.Projects(ctx, append([]string{"create"}, ps...)...); err != nil {
			return err
		}
		var err error
		switch {
		case v == 0:
			_, err = c.Projects(ctx, append([]string{"make-global"}, ps...)...)
		case len(ps) > 1:
			_, err = c.Projects(ctx, append([]string{"join"}, ps...)...)
		}
		if err != nil {
			return err
		}
	}
	return c.RefreshVNIDs(ctx)
}

// StartMaster (re)starts gvs-master in the first node's namespace with the
// arguments it first had (after StopMaster).
func (c *Cluster) StartMaster(ctx context.Context) error {
	if c.Master != nil && !c.Master.Exited() {
		return nil
	}
	p, err := c.Lab.Start(ctx, c.Nodes[0].NS, filepath.Join(c.Lab.StateDir(), "master.log"), c.masterArgs...)
	if err != nil {
		return err
	}
	c.Master = p
	return nil
}

// StopMaster stops gvs-master (and its embedded etcd).
func (c *Cluster) StopMaster() error {
	if c.Master == nil {
		return nil
	}
	return c.Master.Stop()
}

// masterDir is gvs-master's data directory; its pki/ holds the cluster CA
// and the administrator's certificate.
func (c *Cluster) masterDir() string { return filepath.Join(c.Lab.StateDir(), "master") }

// PKIDir is gvs-master's PKI directory (the cluster CA, its own and the
// administrator's certificates).
func (c *Cluster) PKIDir() pki.Dir { return pki.Dir(filepath.Join(c.masterDir(), "pki")) }

// AdminTLS is the administrator identity gvs-master made on first start.
func (c *Cluster) AdminTLS() pki.Files { return c.PKIDir().Files(pki.AdminUser) }

// NodeTLSDir is where node i's certificate bundle (ca.crt, tls.crt,
// tls.key) is issued.
func (c *Cluster) NodeTLSDir(i int) string {
	return filepath.Join(c.Lab.StateDir(), c.Nodes[i].Name+"-tls")
}

// issueNodeCerts issues every node its certificate and etcd user with
// `gvs-master cert node`, as an operator does (in the first node's
// namespace, where gvs-master's etcd is).
func (c *Cluster) issueNodeCerts(ctx context.Context) error {
	for i, n := range c.Nodes {
		out, err := c.Lab.Exec(ctx, c.Nodes[0].NS, filepath.Join(c.Spec.BinDir, "gvs-master"), "cert", "node", n.Name,
			"-data-dir", c.masterDir(), "-out", c.NodeTLSDir(i))
		if err != nil {
			return fmt.Errorf("cluster: gvs-master cert node %s: %w\n%s", n.Name, err, out)
		}
	}
	return nil
}

// RegistryCtl runs `gvsctl ARGS...` with the registry's endpoints and the
// administrator's certificate, in the first node's namespace.
func (c *Cluster) RegistryCtl(ctx context.Context, args ...string) ([]byte, error) {
	a := c.AdminTLS()
	argv := append([]string{filepath.Join(c.Spec.BinDir, "gvsctl"), "-etcd", strings.Join(c.EtcdEndpoints, ","),
		"-etcd-cacert", a.CA, "-etcd-cert", a.Cert, "-etcd-key", a.Key}, args...)
	out, err := c.Lab.Exec(ctx, c.Nodes[0].NS, argv...)
	if err != nil {
		return out, fmt.Errorf("gvsctl %v: %w\n%s", args, err, out)
	}
	return out, nil
}

// Projects runs `gvsctl projects ARGS...` against the control plane: the
// API server in Kubernetes mode (KubeCtl), else the registry (RegistryCtl).
func (c *Cluster) Projects(ctx context.Context, args ...string) ([]byte, error) {
	if c.Kube != nil {
		return c.KubeCtl(ctx, append([]string{"projects"}, args...)...)
	}
	return c.RegistryCtl(ctx, append([]string{"projects"}, args...)...)
}

// ProjectVNIDs reads the projects' VNIDs from the control plane (the
// registry, or the NetNamespaces in Kubernetes mode).
func (c *Cluster) ProjectVNIDs(ctx context.Context) (map[string]uint32, error) {
	if c.Kube != nil {
		return c.kubeVNIDs(ctx)
	}
	out, err := c.Projects(ctx, "list")
	if err != nil {
		return nil, err
	}
	m := map[string]uint32{}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		f := strings.Fields(line) // PROJECT VNID MULTICAST
		if len(f) >= 2 {
			v, err := strconv.ParseUint(f[1], 10, 32)
			if err == nil {
				m[f[0]] = uint32(v)
			}
		}
	}
	return m, nil
}

// startEtcd starts an n-member etcd cluster in the first node's namespace:
// clients on its underlay address, peers on its loopback, all TLS with
// client certificates from the cluster CA (`gvs-master cert etcd-server`
// makes the CA and the members' certificates first).
func (c *Cluster) startEtcd(ctx context.Context, n int) error {
	if _, err := os.Stat(EtcdBinary); err != nil {
		return fmt.Errorf("cluster: %w (apt-get install etcd-server)", err)
	}
	ip := c.Nodes[0].IP
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("m%d=https://127.0.0.1:%d", i+1, 22380+i))
	}
	for i := range n {
		m := &EtcdMember{Name: fmt.Sprintf("m%d", i+1), ClientURL: fmt.Sprintf("https://%s:%d", ip, 22379+10*(i+1)), c: c}
		tlsDir := filepath.Join(c.Lab.StateDir(), "etcd-"+m.Name+"-tls")
		out, err := c.Lab.Exec(ctx, c.Nodes[0].NS, filepath.Join(c.Spec.BinDir, "gvs-master"), "cert", "etcd-server", "etcd-"+m.Name,
			"-data-dir", c.masterDir(), "-san", ip.String(), "-out", tlsDir)
		if err != nil {
			return fmt.Errorf("cluster: etcd %s certificate: %w\n%s", m.Name, err, out)
		}
		f := pki.Dir(tlsDir).Files("tls")
		peer := fmt.Sprintf("https://127.0.0.1:%d", 22380+i)
		m.args = []string{EtcdBinary, "--name", m.Name,
			"--data-dir", filepath.Join(c.Lab.StateDir(), "etcd-"+m.Name),
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", c.Lab.Prefix, "--log-level", "warn",
			"--heartbeat-interval", "100", "--election-timeout", "1000",
			"--cert-file", f.Cert, "--key-file", f.Key, "--trusted-ca-file", f.CA, "--client-cert-auth",
			"--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-trusted-ca-file", f.CA, "--peer-client-cert-auth"}
		c.Etcd = append(c.Etcd, m)
		c.EtcdEndpoints = append(c.EtcdEndpoints, m.ClientURL)
		if err := m.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Start (re)starts the member on its data directory.
func (m *EtcdMember) Start(ctx context.Context) error {
	if m.proc != nil && !m.proc.Exited() {
		return nil
	}
	p, err := m.c.Lab.Start(ctx, m.c.Nodes[0].NS, filepath.Join(m.c.Lab.StateDir(), "etcd-"+m.Name+".log"), m.args...)
	if err != nil {
		return fmt.Errorf("cluster: etcd %s: %w", m.Name, err)
	}
	m.proc = p
	return nil
}

// Stop stops the member (SIGTERM, then SIGKILL).
func (m *EtcdMember) Stop() error {
	if m.proc == nil {
		return nil
	}
	return m.proc.Stop()
}

// RefreshVNIDs re-reads the projects' VNIDs from the registry into the
// pods (after gvsctl projects join/isolate/make-global), so Allowed and
// Reachability expect the new isolation.
func (c *Cluster) RefreshVNIDs(ctx context.Context) error {
	got, err := c.ProjectVNIDs(ctx)
	if err != nil {
		return err
	}
	for i := range c.Nodes {
		for j := range c.Nodes[i].Pods {
			p := &c.Nodes[i].Pods[j]
			if c.Spec.Mode == "multitenant" || c.Spec.Mode == "networkpolicy" { // pods carry their namespace's VNID
				p.VNID = got[p.Project]
			}
		}
	}
	return nil
}

// StopNode stops node i's gvs-switchd (its lease then expires).
func (c *Cluster) StopNode(i int) error {
	if p := c.Nodes[i].proc; p != nil {
		return p.Stop()
	}
	return nil
}
