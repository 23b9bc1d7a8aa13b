package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/gvswitch/gvs/internal/etcdtest"
	"github.com/gvswitch/gvs/internal/nstest"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
)

// The environment variables that make TestRunLeavesConfig's process the
// daemon it starts inside a namespace of its own (runDaemonChild).
const (
	cfgTestEtcdEnv  = "GVS_CFGTEST_ETCD"
	cfgTestNetnsEnv = "GVS_CFGTEST_NETNS"
	cfgTestDirEnv   = "GVS_CFGTEST_DIR"
)

// A real run with the etcd registry as the control plane, and a subnet
// change while it runs, leave the caller's Config as it was: the subnet the registry gives and the fields
// it fills in are the daemon's own state, which Daemon.Config returns.
//
// The daemon runs in a child process started inside a network namespace
// the test created (ip netns exec), so that none of the threads Run's
// goroutines use is in the machine's namespace; the test's embedded etcd
// listens on a unix socket the child reaches through the file system, and
// the test runs gvs-master's subnet assignment (registry.Master).
func TestRunLeavesConfig(t *testing.T) {
	if os.Getenv(cfgTestEtcdEnv) != "" {
		runDaemonChild(t)
		return
	}
	if testing.Short() {
		t.Skip("runs a daemon with etcd (-short)")
	}
	nstest.RequireRoot(t)
	e := etcdtest.Start(t, etcdtest.Options{Insecure: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg := e.Dial(t, pki.MasterUser)
	rc := registry.Config{
		ClusterNetworks: []master.ClusterNetwork{{CIDR: netip.MustParsePrefix("10.128.0.0/14"), HostSubnetLength: 9}},
		ServiceNetwork:  "172.30.0.0/16",
		Mode:            "multitenant",
		GlobalProjects:  []string{"default"},
	}
	if err := reg.PutConfig(ctx, rc); err != nil {
		t.Fatal(err)
	}
	mctx, stopMaster := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = (&registry.Master{Reg: reg, Config: rc}).Run(mctx)
	}()
	t.Cleanup(func() { stopMaster(); <-done })

	ns := nstest.New(t, "daemon", "cfg")
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0],
		"-test.run=^TestRunLeavesConfig$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), cfgTestEtcdEnv+"="+e.ClientURL, cfgTestNetnsEnv+"="+ns, cfgTestDirEnv+"="+dir)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput() // CommandContext kills the child by its pid if the test times out
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRunLeavesConfig") {
		t.Fatalf("daemon process: %v\n%s", err, out)
	}
	t.Logf("daemon process:\n%s", out)
}

// runDaemonChild is TestRunLeavesConfig inside its namespace: it runs a
// daemon that follows the registry until it is ready,
// stops it, and compares the Config it gave New with a deep copy taken
// before.
func runDaemonChild(t *testing.T) {
	ns, dir := os.Getenv(cfgTestNetnsEnv), os.Getenv(cfgTestDirEnv)
	// Never run a daemon in the machine's namespace: check where this
	// process is before anything else.
	want, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatalf("netns %q: %v", ns, err)
	}
	defer want.Close()
	here, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer here.Close()
	if !here.Equal(want) {
		t.Fatalf("not inside netns %s: refusing to run a daemon", ns)
	}
	// The node's underlay address, on lo: vxlan0 binds it.
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err == nil {
		err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(192, 0, 2, 1), Mask: net.CIDRMask(32, 32)}})
	}
	if err != nil {
		t.Fatalf("lo: %v", err)
	}

	no := false
	cfg := &Config{
		NodeName:      "cfgtest",
		NodeIP:        "192.0.2.1",
		EtcdEndpoints: []string{os.Getenv(cfgTestEtcdEnv)},
		EtcdInsecure:  true,
		ControlSocket: filepath.Join(dir, "ctl.sock"),
		HandoffSocket: "off",
		MetricsAddr:   "off",
		StateDir:      filepath.Join(dir, "state"),
		NAT:           &no,
		SchedSlice:    "0",
		// Ignored with a control plane, but the daemon must not write them
		// either.
		Projects: map[string]uint32{"a": 10},
		Peers:    []PeerConfig{{Name: "p", IP: "192.0.2.9", Subnet: "10.131.0.0/23"}},
	}
	before := jsonCopy(t, cfg)
	ready := &readyHandler{Handler: slog.NewTextHandler(os.Stderr, nil), once: new(sync.Once), ready: make(chan struct{})}
	d, err := New(cfg, slog.New(ready))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, before) {
		t.Errorf("New wrote the caller's Config:\n got %+v\nwant %+v", *cfg, *before)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()
	select { // Run logs it once it has made the node's state and serves
	case <-ready.ready:
	case err := <-runErr:
		t.Fatalf("Run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the daemon is not ready after 60s")
	}
	eff := d.Config()
	// A subnet change (the registry's after a partition, as
	// etcdsource's agent calls it) is the daemon's state too.
	moved := netip.MustParsePrefix("10.128.4.0/23")
	if err := d.node.ChangeSubnet(moved); err != nil {
		t.Errorf("ChangeSubnet: %v", err)
	}
	if got := d.Config().Subnet; got != moved.String() {
		t.Errorf("Daemon.Config().Subnet %q after ChangeSubnet, want %v", got, moved)
	}
	if !reflect.DeepEqual(cfg, before) {
		t.Errorf("ChangeSubnet wrote the caller's Config:\n got %+v\nwant %+v", *cfg, *before)
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !reflect.DeepEqual(cfg, before) {
		t.Errorf("Run wrote the caller's Config:\n got %+v\nwant %+v", *cfg, *before)
	}
	// What the registry told the node is the daemon's, from Config.
	sub, err := netip.ParsePrefix(eff.Subnet)
	if err != nil || !netip.MustParsePrefix("10.128.0.0/14").Overlaps(sub) || sub.Bits() != 23 {
		t.Errorf("Daemon.Config().Subnet %q, want a /23 of 10.128.0.0/14 from the registry", eff.Subnet)
	}
	if eff.Mode != "multitenant" || eff.ServiceNetwork != "172.30.0.0/16" ||
		!reflect.DeepEqual(eff.ClusterNetworks, []string{"10.128.0.0/14"}) {
		t.Errorf("Daemon.Config() not filled from the registry: mode %q, serviceNetwork %q, clusterNetworks %v",
			eff.Mode, eff.ServiceNetwork, eff.ClusterNetworks)
	}
	fmt.Fprintln(os.Stderr, "node subnet from the registry:", eff.Subnet)
}

// jsonCopy is a deep copy of c made without Config.clone.
func jsonCopy(t *testing.T, c *Config) *Config {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	n, err := DecodeConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readyHandler closes ready when the daemon logs that it is ready: the
// test's goroutine then sees what Run made before (the node's state).
type readyHandler struct {
	slog.Handler
	once  *sync.Once
	ready chan struct{}
}

func (h *readyHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "gvs-switchd ready" {
		h.once.Do(func() { close(h.ready) })
	}
	return h.Handler.Handle(ctx, r)
}

func (h *readyHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &readyHandler{Handler: h.Handler.WithAttrs(as), once: h.once, ready: h.ready}
}

func (h *readyHandler) WithGroup(g string) slog.Handler {
	return &readyHandler{Handler: h.Handler.WithGroup(g), once: h.once, ready: h.ready}
}
