package etcdsource

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/internal/nstest"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
)

// countSink stands in for a node's dataplane: it records what the agent
// would install.
type countSink struct {
	source.Discard // what it does not record
	mu             sync.Mutex
	remotes        map[netip.Addr]bool
	projects       map[string]uint32
	subnets        []netip.Prefix // ChangeSubnet calls
}

func (s *countSink) ChangeSubnet(p netip.Prefix) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subnets = append(s.subnets, p)
	return nil
}

func (s *countSink) AddRemote(p sdn.RemoteNode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remotes[p.IP] = true
	return nil
}

func (s *countSink) RemoveRemote(ip netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.remotes, ip)
	return nil
}

func (s *countSink) SetProjectVNID(p string, v uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.projects[p] = v
	return nil
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func rssKB(pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

// TestControlPlaneScale: a real gvs-master (embedded etcd) and N simulated
// nodes (the real agent with a counting sink, one etcd client each) while
// P projects are created. Reports convergence time and memory. Run with
// make test-scale [GVS_SCALE_NODES=500 GVS_SCALE_PROJECTS=2000], which sets
// GVS_SCALE=1 and, as root, runs it in a throwaway network namespace.
func TestControlPlaneScale(t *testing.T) {
	if os.Getenv("GVS_SCALE") == "" {
		t.Skip("set GVS_SCALE=1 to run the control-plane scale test")
	}
	nstest.RequireRoot(t)
	nodes, projects := envInt("GVS_SCALE_NODES", 500), envInt("GVS_SCALE_PROJECTS", 2000)
	dir, err := os.MkdirTemp("", "gvs-scale-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/gvswitch/gvs/cmd/gvs-master").CombinedOutput()
	if err != nil {
		t.Fatalf("build gvs-master: %v\n%s", err, out)
	}
	// gvs-master runs in a namespace of its own; clients reach its etcd
	// over a unix socket (named localhost: the TLS server name).
	ns := nstest.New(t, "scale", "master")
	client := "unixs://" + filepath.Join(dir, "localhost")
	cmd := exec.Command("ip", "netns", "exec", ns, filepath.Join(dir, "gvs-master"), "--data-dir", filepath.Join(dir, "data"),
		"--listen-client", client, "--listen-peer", "https://127.0.0.1:2380",
		"--cluster-network", "10.128.0.0/14:9", "--cluster-network", "10.200.0.0/16:8", "--node-lease-ttl", "30")
	logf, _ := os.Create(filepath.Join(dir, "master.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pkiDir := pki.Dir(filepath.Join(dir, "data", "pki"))
	var reg *registry.Registry
	deadline := time.Now().Add(time.Minute)
	for {
		if reg == nil {
			if cli, err := registry.Dial(registry.DialConfig{Endpoints: []string{client}, TLS: pkiDir.Files(pki.MasterUser)}); err == nil {
				defer cli.Close()
				reg = registry.New(cli)
			}
		}
		if reg != nil {
			if _, err := reg.GetConfig(ctx); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("gvs-master did not publish its configuration")
		}
		time.Sleep(100 * time.Millisecond) // poll at a fixed interval; the scale test measures times with it
	}
	idleRSS := rssKB(cmd.Process.Pid, "VmRSS")

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	log := slog.New(slog.DiscardHandler)
	sinks := make([]*countSink, nodes)
	agents := make([]*agent, nodes)
	start := time.Now()
	var wg sync.WaitGroup
	// Projects, in batches of 50 per transaction, from 4 writers.
	for w := range 4 {
		wg.Go(func() {
			for b := w * 50; b < projects; b += 200 {
				_, err := reg.UpdateProjects(ctx, nil, func(v *master.VNIDs) error {
					for i := b; i < min(b+50, projects); i++ {
						if _, err := v.Create(fmt.Sprintf("p%04d", i)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	ca, err := pkiDir.LoadCA()
	if err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		name := fmt.Sprintf("node-%04d", i)
		if err := reg.AuthorizeNode(ctx, name); err != nil {
			t.Fatal(err)
		}
		if _, _, err := pkiDir.Ensure(ca, name, pki.Request{CommonName: pki.NodeUser(name), Usage: pki.ClientAuth}, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range nodes {
		wg.Go(func() {
			c, err := registry.Dial(registry.DialConfig{Endpoints: []string{client}, TLS: pkiDir.Files(fmt.Sprintf("node-%04d", i))})
			if err != nil {
				t.Error(err)
				return
			}
			sinks[i] = &countSink{remotes: map[netip.Addr]bool{}, projects: map[string]uint32{}}
			ip := netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)})
			a := newAgent(c, registry.Node{Name: fmt.Sprintf("node-%04d", i), IP: ip}, 30, sinks[i], log)
			if _, err := a.register(ctx, netip.Prefix{}); err != nil {
				t.Error(err)
				return
			}
			a.run(ctx)
			agents[i] = a
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	registered := time.Since(start)
	converged := func(check func(*countSink) bool) bool {
		for _, s := range sinks {
			s.mu.Lock()
			ok := check(s)
			s.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	}
	full := func(s *countSink) bool { return len(s.remotes) == nodes-1 && len(s.projects) == projects+1 }
	for !converged(full) {
		if ctx.Err() != nil {
			t.Fatal("did not converge")
		}
		time.Sleep(50 * time.Millisecond) // a fixed interval: its resolution is that of the convergence measured
	}
	convergence := time.Since(start)

	// One change, seen by every node.
	t0 := time.Now()
	if _, err := reg.UpdateProjects(ctx, nil, func(v *master.VNIDs) error { return v.Join("p0000", "p0001") }); err != nil {
		t.Fatal(err)
	}
	joined := func(s *countSink) bool { return s.projects["p0001"] == s.projects["p0000"] }
	for !converged(joined) {
		time.Sleep(5 * time.Millisecond) // a fixed interval: its resolution is that of the time measured
	}
	change := time.Since(t0)

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perAgent := float64(after.HeapAlloc-before.HeapAlloc) / float64(nodes) / 1024
	t.Logf("%d nodes, %d projects: all registered in %v; every node converged (%d remotes, %d projects) in %v",
		nodes, projects, registered.Round(time.Millisecond), nodes-1, projects+1, convergence.Round(time.Millisecond))
	t.Logf("a VNID change reached all %d nodes in %v", nodes, change.Round(time.Millisecond))
	t.Logf("gvs-master (with embedded etcd) RSS: %d MiB idle, %d MiB after, peak %d MiB",
		idleRSS/1024, rssKB(cmd.Process.Pid, "VmRSS")/1024, rssKB(cmd.Process.Pid, "VmHWM")/1024)
	t.Logf("node agent: %.0f KiB of Go heap per node (registry state + etcd client); test process RSS %d MiB for %d agents",
		perAgent, rssKB(os.Getpid(), "VmRSS")/1024, nodes)
	cancel()
	for _, a := range agents {
		a.close()
	}
}
