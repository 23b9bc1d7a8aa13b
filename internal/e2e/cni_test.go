package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/netconf"
)

// cniCluster is one node (two pods attached by CNI ADD during Up) and an
// external host.
func cniCluster(t *testing.T, short string, tapPool int) *cluster.Cluster {
	return up(t, short, cluster.Spec{
		Lab:   lab.Spec{Nodes: 1, PodsPerNode: 2, Projects: []string{"default", "alpha"}, External: true},
		Mode:  "multitenant",
		VNIDs: map[string]uint32{"alpha": 10},
		CNI:   true, TapPool: tapPool,
	})
}

// podNS creates an extra pod namespace for the test and removes it after.
func podNS(t *testing.T, c *cluster.Cluster, name string) string {
	t.Helper()
	full := c.Spec.Lab.Prefix + "-" + name
	p, err := netconf.CreateNamedNS(full)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netconf.DeleteNamedNS(full) })
	return p
}

type nodeShow struct{ Ports, Pods, Rules int }

func show(t *testing.T, c *cluster.Cluster) nodeShow {
	t.Helper()
	var s nodeShow
	if err := json.Unmarshal([]byte(ctl(t, c, 0, "-o", "json", "show")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func leaseFiles(t *testing.T, c *cluster.Cluster) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(c.CNIStateDir(0), "ipam"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func cniCode(err error) uint {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

func TestCNIAddCheckDelRestart(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := cniCluster(t, "cni", 2)
	cni := c.CNI()
	list, err := c.CNIConfList(0, "1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := c.Nodes[0].Pods[0], c.Nodes[0].Pods[1]
	if ok, out := ping(t, c.Lab, p1.NS, p2.IP, 56); !ok {
		t.Fatalf("pods attached by CNI ADD do not reach each other:\n%s", out)
	}

	ns := podNS(t, c, "x1")
	rt := cluster.RuntimeConf("ctr-x1", ns, "eth0", "alpha", "x1")
	var res types.Result
	err = c.InNode(0, func() (err error) { res, err = cni.AddNetworkList(ctx(t), list, rt); return })
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	r, err := types100.GetResult(res)
	if err != nil {
		t.Fatal(err)
	}
	ip, _ := netip.AddrFromSlice(r.IPs[0].Address.IP.To4())
	if len(r.Interfaces) != 1 || r.Interfaces[0].Sandbox != ns || len(r.Routes) != 3 ||
		r.Interfaces[0].Mac != fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", ip.As4()[0], ip.As4()[1], ip.As4()[2], ip.As4()[3]) {
		t.Errorf("result: %s", mustJSON(r))
	}
	out, _ := nsExec(t, ns, "ip", "-br", "addr", "show", "eth0")
	if !strings.Contains(string(out), r.IPs[0].Address.String()) {
		t.Errorf("eth0 in the pod: %s, want %s", out, r.IPs[0].Address.String())
	}
	if out, err := nsExec(t, ns, "ping", "-c", "2", "-i", "0.2", "-W", "2", p1.IP.String()); err != nil {
		t.Errorf("the new pod does not reach %s:\n%s", p1.IP, out)
	}
	// ADD into a namespace that already has eth0 (a veth): code 101,
	// and nothing is left behind.
	busy := podNS(t, c, "busy")
	if out, err := nsExec(t, busy, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	beforeBusy, leasesBusy := show(t, c), leaseFiles(t, c)
	err = c.InNode(0, func() error {
		_, err := cni.AddNetworkList(ctx(t), list, cluster.RuntimeConf("ctr-busy", busy, "eth0", "alpha", "busy"))
		return err
	})
	if cniCode(err) != 101 {
		t.Errorf("ADD onto an existing eth0: %v, want code 101", err)
	}
	if s := show(t, c); s != beforeBusy || leaseFiles(t, c) != leasesBusy {
		t.Errorf("a failed ADD left something: %+v, %d leases (before %+v, %d)", s, leaseFiles(t, c), beforeBusy, leasesBusy)
	}
	// Second ADD of the same attachment: interface already exists.
	err = c.InNode(0, func() error { _, err := cni.AddNetworkList(ctx(t), list, rt); return err })
	if cniCode(err) != 101 {
		t.Errorf("second ADD: %v, want code 101", err)
	}
	if err := c.InNode(0, func() error { return cni.CheckNetworkList(ctx(t), list, rt) }); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	// CHECK names what is missing.
	if out, err := nsExec(t, ns, "ip", "route", "del", "172.30.0.0/16"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	err = c.InNode(0, func() error { return cni.CheckNetworkList(ctx(t), list, rt) })
	if err == nil || !strings.Contains(err.Error(), "route 172.30.0.0/16") {
		t.Errorf("CHECK after deleting the service route: %v", err)
	}

	// Restart: the leases survive, the pods are re-attached with the same
	// address and port.
	// A pod whose namespace disappears while the daemon is down keeps its
	// lease (until DEL), but is not re-attached.
	gone := podNS(t, c, "gone")
	goneRT := cluster.RuntimeConf("ctr-gone", gone, "eth0", "default", "gone")
	if err := c.InNode(0, func() error { _, err := cni.AddNetworkList(ctx(t), list, goneRT); return err }); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	before := ctl(t, c, 0, "pods")
	leasesBefore := leaseFiles(t, c)
	if err := c.RestartDaemon(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	if err := netconf.DeleteNamedNS(filepath.Base(gone)); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartDaemon(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	if n := leaseFiles(t, c); n != leasesBefore {
		t.Errorf("after restarts: %d leases, want %d", n, leasesBefore)
	}
	if err := c.InNode(0, func() error { return cni.DelNetworkList(ctx(t), list, goneRT) }); err != nil {
		t.Errorf("DEL of the pod whose namespace vanished: %v", err)
	}
	if n := leaseFiles(t, c); n != leasesBefore-1 {
		t.Errorf("after its DEL: %d leases, want %d", n, leasesBefore-1)
	}
	before = strings.Join(slices.DeleteFunc(strings.Split(before, "\n"), func(l string) bool { return strings.Contains(l, "gone") }), "\n")
	if after := ctl(t, c, 0, "pods"); after != before {
		t.Errorf("pods after a daemon restart:\n%s\nbefore:\n%s", after, before)
	}
	if ok, out := ping(t, c.Lab, p1.NS, p2.IP, 56); !ok {
		t.Errorf("after a daemon restart the pods do not reach each other:\n%s", out)
	}
	if err := c.InNode(0, func() error { return cni.CheckNetworkList(ctx(t), list, rt) }); err != nil {
		t.Errorf("CHECK after restart: %v", err)
	}

	// DEL, DEL again, DEL without a netns, DEL of a container never seen.
	base := show(t, c)
	for _, rc := range []*libcni.RuntimeConf{rt, rt, cluster.RuntimeConf("ctr-x1", "", "eth0", "alpha", "x1"),
		cluster.RuntimeConf("never-seen", "", "eth0", "alpha", "nobody")} {
		if err := c.InNode(0, func() error { return cni.DelNetworkList(ctx(t), list, rc) }); err != nil {
			t.Errorf("DEL %s netns %q: %v", rc.ContainerID, rc.NetNS, err)
		}
	}
	s := show(t, c)
	if s.Pods != base.Pods-1 || s.Ports != base.Ports-1 || leaseFiles(t, c) != 2 {
		t.Errorf("after DEL: %+v (before %+v), %d lease files; want one pod and port less, 2 leases", s, base, leaseFiles(t, c))
	}
	if out, _ := nsExec(t, ns, "ip", "link", "show", "eth0"); !strings.Contains(string(out), "does not exist") {
		t.Errorf("eth0 still in the pod after DEL: %s", out)
	}
	err = c.InNode(0, func() error { return cni.CheckNetworkList(ctx(t), list, rt) })
	if cniCode(err) != types.ErrUnknownContainer {
		t.Errorf("CHECK after DEL: %v, want code 3", err)
	}

	// GC through libcni: only p1 stays.
	gcArgs := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: cluster.ContainerID(p1), IfName: "eth0"}}}
	if err := c.InNode(0, func() error { return cni.GCNetworkList(ctx(t), list, gcArgs) }); err != nil {
		t.Errorf("GC: %v", err)
	}
	if n := leaseFiles(t, c); n != 1 {
		t.Errorf("after GC: %d leases, want 1", n)
	}
	if err := c.InNode(0, func() error { return cni.GetStatusNetworkList(ctx(t), list) }); err != nil {
		t.Errorf("STATUS: %v", err)
	}
}

func TestCNIConcurrent(t *testing.T) {
	c := cniCluster(t, "cnc", 8)
	cni := c.CNI()
	list, err := c.CNIConfList(0, "1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	base, baseLeases := show(t, c), leaseFiles(t, c)
	const n = 50
	nss := make([]string, n)
	for i := range n {
		nss[i] = podNS(t, c, fmt.Sprint("c", i))
	}
	rts := make([]*libcni.RuntimeConf, n)
	ips := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		rts[i] = cluster.RuntimeConf(fmt.Sprint("ctr-c", i), nss[i], "eth0", []string{"default", "alpha"}[i%2], fmt.Sprint("c", i))
		wg.Go(func() {
			err := c.InNode(0, func() error {
				res, err := cni.AddNetworkList(ctx(t), list, rts[i])
				if err == nil {
					r, _ := types100.GetResult(res)
					ips[i] = r.IPs[0].Address.String()
				}
				return err
			})
			if err != nil {
				t.Errorf("ADD %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for i, ip := range ips {
		if j, dup := seen[ip]; dup && ip != "" {
			t.Errorf("pods %d and %d both got %s", j, i, ip)
		}
		seen[ip] = i
	}
	s := show(t, c)
	if s.Pods != base.Pods+n || s.Ports != base.Ports+n || leaseFiles(t, c) != baseLeases+n {
		t.Errorf("after %d ADDs: %+v (before %+v), %d leases", n, s, base, leaseFiles(t, c))
	}
	// Some pods' namespaces are gone before their DEL, as when a runtime
	// cleans up late.
	for i := 0; i < n; i += 5 {
		if err := netconf.DeleteNamedNS(filepath.Base(nss[i])); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		wg.Go(func() {
			if err := c.InNode(0, func() error { return cni.DelNetworkList(ctx(t), list, rts[i]) }); err != nil {
				t.Errorf("DEL %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	s = show(t, c)
	if s != base || leaseFiles(t, c) != baseLeases {
		t.Errorf("after the DELs: %+v, %d leases; want %+v, %d leases (leaked rules, ports or leases)", s, leaseFiles(t, c), base, baseLeases)
	}
}

// TestCNIChainPortmap chains gvs + Debian's portmap and tuning (spec
// 1.0.0) and reaches a pod through a HostPort from the external host.
func TestCNIChainPortmap(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	if _, err := os.Stat(filepath.Join(cluster.DebianCNIDir, "portmap")); err != nil {
		t.Skip("containernetworking-plugins is not installed (make deps)")
	}
	c := cniCluster(t, "cnp", 0)
	cni := c.CNI()
	list, err := c.CNIConfList(0, "1.0.0",
		map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "snat": true},
		map[string]any{"type": "tuning", "sysctl": map[string]string{"net.core.somaxconn": "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	ns := podNS(t, c, "web")
	rt := cluster.RuntimeConf("ctr-web", ns, "eth0", "default", "web")
	rt.CapabilityArgs = map[string]any{"portMappings": []map[string]any{{"hostPort": 18080, "containerPort": 5201, "protocol": "tcp"}}}
	var res types.Result
	if err := c.InNode(0, func() (err error) { res, err = cni.AddNetworkList(ctx(t), list, rt); return }); err != nil {
		t.Fatalf("chained ADD: %v", err)
	}
	if r, err := types100.GetResult(res); err != nil || res.Version() != "1.0.0" || len(r.IPs) != 1 {
		t.Errorf("chained result (%v): %s", err, mustJSON(res))
	}
	if out, _ := nsExec(t, ns, "sysctl", "-n", "net.core.somaxconn"); strings.TrimSpace(string(out)) != "1000" {
		t.Errorf("tuning did not run after gvs: somaxconn %q", out)
	}
	// CHECK of the whole chain fails in Debian's portmap 1.1.1, which
	// looks for IPv6 chains it never made (containernetworking/plugins#819);
	// CHECK gvs on its own, with the chain's cached result.
	gvsOnly, err := c.CNIConfList(0, "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.InNode(0, func() error { return cni.CheckNetworkList(ctx(t), gvsOnly, rt) }); err != nil {
		t.Errorf("CHECK of gvs after the chained ADD: %v", err)
	}
	bin := filepath.Join(binDir, "gvs-bench")
	srv := exec.Command("ip", "netns", "exec", filepath.Base(ns), bin, "tcp-server", "-l", ":5201")
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }() // by its pid: ip netns exec execs the server
	// The server prints "listening on ADDR" once it listens.
	listening := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		listening <- strings.HasPrefix(line, "listening on")
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case ok := <-listening:
		if !ok {
			t.Fatal("tcp-server did not start listening")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tcp-server did not start listening")
	}
	to := netip.AddrPortFrom(c.Nodes[0].IP, 18080).String()
	out, err := c.Lab.Exec(ctx(t), c.Lab.External.NS, bin, "tcp-client", "-c", to, "-bytes", "100000")
	if err != nil {
		t.Errorf("external host → HostPort %s: %v\n%s", to, err, out)
	}
	if err := c.InNode(0, func() error { return cni.DelNetworkList(ctx(t), list, rt) }); err != nil {
		t.Errorf("chained DEL: %v", err)
	}
	if out, err := c.Lab.Exec(ctx(t), c.Lab.External.NS, bin, "tcp-client", "-c", to, "-bytes", "1000"); err == nil {
		t.Errorf("the HostPort still answers after DEL: %s", out)
	}
}

// nsExec runs a command in a namespace the test made (not one of the lab's).
func nsExec(t *testing.T, nsPath string, argv ...string) ([]byte, error) {
	t.Helper()
	return exec.CommandContext(ctx(t), "ip", append([]string{"netns", "exec", filepath.Base(nsPath)}, argv...)...).CombinedOutput()
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// cnitool returns the cnitool binary (make tools installs it), building
// it from the module cache when it is not on PATH.
func cnitool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("cnitool"); err == nil {
		return p
	}
	out := filepath.Join(t.TempDir(), "cnitool")
	if b, err := exec.Command("go", "build", "-o", out, "github.com/containernetworking/cni/cnitool").CombinedOutput(); err != nil {
		t.Skipf("cnitool not installed and not buildable (make tools): %v\n%s", err, b)
	}
	return out
}

// TestCNITool drives gvs-cni with cnitool, run in the node's namespace
// the way an operator would: add, check, del, del.
func TestCNITool(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	tool := cnitool(t)
	c := cniCluster(t, "cnt", 0)
	list, err := c.CNIConfList(0, "1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	netdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(netdir, "gvs-pods.conflist"), list.Bytes, 0o644); err != nil {
		t.Fatal(err)
	}
	ns := podNS(t, c, "tool")
	run := func(verb string) (string, error) {
		cmd := exec.CommandContext(ctx(t), "ip", "netns", "exec", c.Nodes[0].NS, tool, verb, "gvs-pods", ns)
		cmd.Env = append(os.Environ(), "NETCONFPATH="+netdir, "CNI_PATH="+c.CNIBinDir(),
			"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=alpha;K8S_POD_NAME=tool")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("add")
	if err != nil || !strings.Contains(out, `"0a:58:`) {
		t.Fatalf("cnitool add: %v\n%s", err, out)
	}
	if out, err := run("check"); err != nil {
		t.Errorf("cnitool check: %v\n%s", err, out)
	}
	for range 2 {
		if out, err := run("del"); err != nil {
			t.Errorf("cnitool del: %v\n%s", err, out)
		}
	}
	if n := leaseFiles(t, c); n != 2 {
		t.Errorf("after cnitool del: %d leases, want the cluster's 2", n)
	}
}
