package e2e

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn/pki"
)

// etcdctl runs Debian's etcdctl in namespace ns against the cluster's
// registry with the identity files.
func etcdctl(t *testing.T, c *cluster.Cluster, ns string, f pki.Files, args ...string) (string, error) {
	t.Helper()
	argv := []string{"etcdctl", "--endpoints", strings.Join(c.EtcdEndpoints, ","), "--cacert", f.CA,
		"--dial-timeout=3s", "--command-timeout=5s"}
	if f.Cert != "" {
		argv = append(argv, "--cert", f.Cert, "--key", f.Key)
	}
	out, err := c.Lab.Exec(ctx(t), ns, append(argv, args...)...)
	return string(out), err
}

// issueTo writes a certificate from ca for req into dir.
func issueTo(t *testing.T, ca *pki.CA, dir string, req pki.Request) pki.Files {
	t.Helper()
	cert, key, err := ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	f, err := pki.WriteBundle(dir, "tls", ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRegistryRefusesTenants: from a tenant pod, the registry answers
// nobody without a certificate of the cluster CA that is valid now and
// whose user may do what it asks: no certificate, another CA's, an expired
// one, and a node's certificate writing a project or another node's
// record are each refused; the administrator's certificate works.
func TestRegistryRefusesTenants(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	if _, err := exec.LookPath("etcdctl"); err != nil {
		t.Fatalf("etcdctl: %v (make deps installs etcd-client)", err)
	}
	c := up(t, "sec", cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 2, Projects: []string{"alpha", "beta"}},
		Mode:         "multitenant",
		VNIDs:        map[string]uint32{"alpha": 10, "beta": 11},
		ControlPlane: cluster.ControlPlaneEmbedded,
	})
	pod := c.Nodes[0].Pods[1] // project beta
	host := strings.TrimPrefix(c.EtcdEndpoints[0], "https://")

	out, err := c.Lab.Exec(ctx(t), pod.NS, filepath.Join(binDir, "gvs-bench"), "registry-probe", "-c", host)
	if err != nil || strings.Count(string(out), "refused") != 2 {
		t.Errorf("no certificate: the registry answered a tenant pod: %v\n%s", err, out)
	}

	dir := t.TempDir()
	other, err := pki.NewCA("another CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := c.PKIDir().LoadCA()
	if err != nil {
		t.Fatal(err)
	}
	clusterCA := c.AdminTLS().CA
	otherCA := issueTo(t, other, filepath.Join(dir, "other"), pki.Request{CommonName: pki.AdminUser, Usage: pki.ClientAuth})
	otherCA.CA = clusterCA
	expired := issueTo(t, ca, filepath.Join(dir, "expired"), pki.Request{CommonName: pki.AdminUser, Usage: pki.ClientAuth,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for what, f := range map[string]pki.Files{
		"no certificate":           {CA: clusterCA},
		"another CA's certificate": otherCA,
		"an expired certificate":   expired,
	} {
		if out, err := etcdctl(t, c, pod.NS, f, "get", "/gvs/", "--prefix", "--keys-only"); err == nil {
			t.Errorf("%s: the registry answered:\n%s", what, out)
		}
		if out, err := etcdctl(t, c, pod.NS, f, "put", "/gvs/projects/beta", `{"vnid":0}`); err == nil {
			t.Errorf("%s: the registry took a write:\n%s", what, out)
		}
	}

	// A node's certificate (stolen by the pod): it reads, but writes
	// neither a project nor another node's record.
	n2 := pki.Dir(c.NodeTLSDir(1)).Files("tls")
	if out, err := etcdctl(t, c, pod.NS, n2, "get", "/gvs/config"); err != nil || !strings.Contains(out, "clusterNetworks") {
		t.Errorf("a node cannot read the configuration: %v\n%s", err, out)
	}
	for what, args := range map[string][]string{
		"project beta":     {"put", "/gvs/projects/beta", `{"vnid":0}`},
		"node n1's record": {"put", "/gvs/nodes/" + c.Nodes[0].Name, `{"name":"n1","ip":"192.168.241.66"}`},
		"n1's subnet":      {"del", "/gvs/subnets/" + c.Nodes[0].Name},
	} {
		out, err := etcdctl(t, c, pod.NS, n2, args...)
		if err == nil || !strings.Contains(out, "permission denied") {
			t.Errorf("node n2's certificate writing %s: %v, want permission denied\n%s", what, err, out)
		}
	}

	// The administrator, from the same pod namespace, with gvsctl.
	a := c.AdminTLS()
	out, err = c.Lab.Exec(ctx(t), pod.NS, filepath.Join(binDir, "gvsctl"), "-etcd", c.EtcdEndpoints[0],
		"-etcd-cacert", a.CA, "-etcd-cert", a.Cert, "-etcd-key", a.Key, "-o", "json", "projects", "list")
	if err != nil {
		t.Fatalf("gvsctl projects with the admin certificate: %v\n%s", err, out)
	}
	var projects map[string]uint32
	if err := json.Unmarshal(out, &projects); err != nil {
		t.Fatal(err)
	}
	if projects["beta"] != 11 || projects["alpha"] != 10 {
		t.Errorf("projects after the attempts: %v, want alpha 10, beta 11", projects)
	}
	// A node's certificate through gvsctl: refused with a clear message.
	out, err = c.Lab.Exec(ctx(t), pod.NS, filepath.Join(binDir, "gvsctl"), "-etcd", c.EtcdEndpoints[0],
		"-etcd-tls", c.NodeTLSDir(1), "projects", "make-global", "beta")
	if err == nil || !strings.Contains(string(out), "permission denied") {
		t.Errorf("gvsctl make-global with a node's certificate: %v\n%s", err, out)
	}
	checkReach(t, c, "after the attempts")
}

// newProjectCluster: one node, pods of default and alpha attached by CNI,
// gvs-master with its embedded etcd and the extra flags.
func newProjectCluster(t *testing.T, short string, masterArgs ...string) *cluster.Cluster {
	return up(t, short, cluster.Spec{
		Lab:          lab.Spec{Nodes: 1, PodsPerNode: 2, Projects: []string{"default", "alpha"}},
		Mode:         "multitenant",
		VNIDs:        map[string]uint32{"alpha": 10},
		ControlPlane: cluster.ControlPlaneEmbedded,
		CNI:          true,
		MasterArgs:   masterArgs,
	})
}

// cniAddProject attaches a fresh pod namespace of project to node 0.
func cniAddProject(t *testing.T, c *cluster.Cluster, name, project string) (string, *types100.Result, error) {
	t.Helper()
	ns := podNS(t, c, name)
	list, err := c.CNIConfList(0, "1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	var res *types100.Result
	err = c.InNode(0, func() error {
		r, err := c.CNI().AddNetworkList(ctx(t), list, cluster.RuntimeConf("ctr-"+name, ns, "eth0", project, name))
		if err != nil {
			return err
		}
		res, err = types100.GetResult(r)
		return err
	})
	return ns, res, err
}

// A pod of a project nobody created: gvs-master creates the project on
// the node's request with a fresh VNID of its own, so the pod is isolated
// from every other project and reachable from default.
func TestNewProjectGetsFreshVNID(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := newProjectCluster(t, "newp")
	ns, res, err := cniAddProject(t, c, "g1", "gamma")
	if err != nil {
		t.Fatalf("CNI ADD of a pod in a new project: %v", err)
	}
	vnids, err := c.ProjectVNIDs(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	g := vnids["gamma"]
	if g < 10 || g == vnids["alpha"] || g == vnids["default"] {
		t.Fatalf("project gamma got VNID %d (projects %v), want a fresh one", g, vnids)
	}
	gip := res.IPs[0].Address.IP.String()
	def, alpha := c.Nodes[0].Pods[0], c.Nodes[0].Pods[1]
	ping := func(from string, to string) bool {
		_, err := nsExec(t, from, "ping", "-c", "2", "-i", "0.2", "-W", "1", to)
		return err == nil
	}
	if !ping(ns, def.IP.String()) || !ping(def.NSPath, gip) {
		t.Errorf("gamma and default do not reach each other")
	}
	if ping(ns, alpha.IP.String()) || ping(alpha.NSPath, gip) {
		t.Errorf("gamma (VNID %d) and alpha (VNID %d) reach each other", g, vnids["alpha"])
	}
}

// With project creation off, a pod of an unknown project is not attached:
// CNI ADD fails with code 11 (try again later) naming the project, after
// the node's bounded wait, and leaves no TAP, lease, rule or port behind.
func TestUnknownProjectFailsClosed(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := newProjectCluster(t, "nop", "--create-projects=false")
	var before control.ShowResult
	if err := json.Unmarshal([]byte(ctl(t, c, 0, "-o", "json", "show")), &before); err != nil {
		t.Fatal(err)
	}
	leases := leaseFiles(t, c)
	start := time.Now()
	ns, _, err := cniAddProject(t, c, "d1", "delta")
	took := time.Since(start)
	if err == nil {
		t.Fatal("CNI ADD of a pod in a project nobody may create succeeded")
	}
	var te *types.Error
	if code := cniCode(err); code != types.ErrTryAgainLater {
		t.Errorf("CNI ADD failed with code %d (%v), want %d", code, err, types.ErrTryAgainLater)
	} else if errors.As(err, &te); !strings.Contains(te.Details, "delta") {
		t.Errorf("the error does not name the project: %+v", te)
	}
	if took > 30*time.Second {
		t.Errorf("ADD took %v to fail, want about the 10 s VNID wait", took)
	}
	var after control.ShowResult
	if err := json.Unmarshal([]byte(ctl(t, c, 0, "-o", "json", "show")), &after); err != nil {
		t.Fatal(err)
	}
	if after.Rules != before.Rules || after.Ports != before.Ports || after.Pods != before.Pods {
		t.Errorf("left behind: rules %d→%d, ports %d→%d, pods %d→%d", before.Rules, after.Rules,
			before.Ports, after.Ports, before.Pods, after.Pods)
	}
	if n := leaseFiles(t, c); n != leases {
		t.Errorf("lease files %d→%d", leases, n)
	}
	if out, err := nsExec(t, ns, "ip", "-o", "link"); err != nil || strings.Contains(string(out), "eth0") {
		t.Errorf("the pod namespace has an eth0 left: %v\n%s", err, out)
	}
	vnids, err := c.ProjectVNIDs(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := vnids["delta"]; ok {
		t.Errorf("project delta exists (VNID %d) with creation off", v)
	}
	// An administrator creates it: the retried ADD succeeds.
	if _, err := c.Projects(ctx(t), "create", "delta"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cniAddProject(t, c, "d2", "delta"); err != nil {
		t.Errorf("CNI ADD after the administrator created the project: %v", err)
	}
}

// Replacing certificates while the cluster runs: a node's, and etcd's
// server certificate (gvs-master re-issues a missing one at its restart,
// during which the nodes forward on their last state). No ping between
// nodes is lost, the node presents its new certificate from its next
// connection, and the control plane keeps working.
func TestCertificateReplacement(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := up(t, "crt", cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 2, Projects: []string{"alpha", "beta"}},
		Mode:         "multitenant",
		VNIDs:        map[string]uint32{"alpha": 10, "beta": 11},
		ControlPlane: cluster.ControlPlaneEmbedded,
		NodeLeaseTTL: 10,
	})
	registryOf := func(i int) *control.Registry {
		var s control.ShowResult
		if err := json.Unmarshal([]byte(ctl(t, c, i, "-o", "json", "show")), &s); err != nil {
			t.Fatal(err)
		}
		return s.Registry
	}
	old := registryOf(1)
	if old == nil || old.CertSerial == "" || old.Identity != pki.NodeUser(c.Nodes[1].Name) {
		t.Fatalf("n2's registry identity: %+v", old)
	}
	src, dst := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	p := startPinger(t, c, src, dst.IP)
	if _, ok := p.firstReplyAfter(t, time.Now(), 10*time.Second); !ok {
		t.Fatal("no ping reply before the replacement")
	}
	t0 := time.Now()

	// The node's certificate: a new key and certificate in place.
	out, err := c.Lab.Exec(ctx(t), c.Nodes[0].NS, filepath.Join(binDir, "gvs-master"), "cert", "node", c.Nodes[1].Name,
		"-data-dir", filepath.Dir(string(c.PKIDir())), "-out", c.NodeTLSDir(1))
	if err != nil {
		t.Fatalf("gvs-master cert node: %v\n%s", err, out)
	}
	newCert, err := pki.CertFile(pki.Dir(c.NodeTLSDir(1)).Files("tls").Cert)
	if err != nil {
		t.Fatal(err)
	}
	// etcd's server certificate: removed, gvs-master restarted; it issues
	// a new one, and every client reconnects.
	srv := c.PKIDir().Files("etcd-server")
	oldSrv, err := pki.CertFile(srv.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StopMaster(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(srv.Cert); err != nil {
		t.Fatal(err)
	}
	if err := c.StartMaster(ctx(t)); err != nil {
		t.Fatal(err)
	}
	var newSrv *x509.Certificate
	if !testutil.Eventually(30*time.Second, func() bool {
		newSrv, err = pki.CertFile(srv.Cert)
		return err == nil
	}) || newSrv.SerialNumber.Cmp(oldSrv.SerialNumber) == 0 {
		t.Fatalf("gvs-master did not issue a new server certificate: %v", err)
	}
	if !testutil.Eventually(40*time.Second, func() bool {
		r := registryOf(1)
		return r != nil && r.CertSerial == newCert.SerialNumber.Text(16)
	}) {
		t.Errorf("n2 presents %+v, want its new certificate %s", registryOf(1), newCert.SerialNumber.Text(16))
	}
	// The control plane works with the new certificates.
	if _, err := c.Projects(ctx(t), "join", "alpha", "beta"); err != nil {
		t.Fatal(err)
	}
	checkReach(t, c, "after the replacement")
	if r, _ := p.lastGap(t, t0); r > time.Second {
		t.Errorf("ping between the nodes stopped for %v during the replacement", r)
	}
}

// lastGap returns the longest time without a reply after since (up to
// now), and the number of replies.
func (p *pinger) lastGap(t *testing.T, since time.Time) (time.Duration, int) {
	t.Helper()
	prev, gap, n := since, time.Duration(0), 0
	for _, r := range p.replies(t) {
		if r.Before(since) {
			continue
		}
		gap = max(gap, r.Sub(prev))
		prev = r
		n++
	}
	return max(gap, time.Since(prev)), n
}
