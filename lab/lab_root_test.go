package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
}

// testPrefix returns a unique lab prefix for this test run, e.g. "lt123456a".
func testPrefix(t *testing.T, tag string) string {
	t.Helper()
	p := fmt.Sprintf("lt%d%s", os.Getpid(), tag)
	if err := validPrefix(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// leftovers lists /run/netns entries named "<prefix>-*".
func leftovers(prefix string) []string {
	m, _ := filepath.Glob(filepath.Join(NetnsDir, prefix+"-*"))
	return m
}

func TestLab(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := testPrefix(t, "a")
	t.Cleanup(func() { _ = DestroyPrefix(prefix) })

	l, err := Create(ctx, Spec{Prefix: prefix, Nodes: 2, PodsPerNode: 2, Projects: []string{"default", "alpha"}, External: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})

	for _, ns := range l.Namespaces() {
		if !exists(ns) {
			t.Errorf("namespace %s missing", ns)
		}
	}
	if got, want := len(leftovers(prefix)), 2*2+2+1+1; got != want {
		t.Errorf("%d namespaces %s-*, want %d", got, prefix, want)
	}
	if _, err := Create(ctx, Spec{Prefix: prefix}); !errors.Is(err, ErrExists) {
		t.Errorf("second Create = %v, want ErrExists", err)
	}

	// The underlay: both nodes and the external host reach each other.
	n1, n2, ext := l.Nodes[0], l.Nodes[1], l.External
	for _, c := range []struct {
		from string
		to   Host
	}{
		{n1.NS, Host{NS: n2.NS, IP: n2.IP}},
		{n2.NS, Host{NS: n1.NS, IP: n1.IP}},
		{n1.NS, *ext},
		{ext.NS, Host{NS: n2.NS, IP: n2.IP}},
	} {
		r, err := Ping(ctx, l, c.from, c.to.IP, 1000, 3)
		if err != nil {
			t.Errorf("ping %s -> %s (%s): %v", c.from, c.to.NS, c.to.IP, err)
			continue
		}
		if r.Received != 3 || r.Loss != 0 || r.Avg <= 0 || len(r.RTTs) != 3 {
			t.Errorf("ping %s -> %s: %+v", c.from, c.to.IP, r)
		}
	}

	// Pods are empty: only lo, and it is up.
	out, err := l.Exec(ctx, n1.Pods[1].NS, "ip", "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); strings.Count(s, "\n") != 1 || !strings.Contains(s, "lo:") || !strings.Contains(s, "UP") {
		t.Errorf("pod links:\n%s", s)
	}
	// Nodes have no default route.
	out, err = l.Exec(ctx, n1.NS, "ip", "route", "show", "default")
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("node default route: %q %v", out, err)
	}
	// A pod cannot reach the underlay.
	if _, err := Ping(ctx, l, n1.Pods[0].NS, n2.IP, 0, 1); !errors.Is(err, ErrNoReply) {
		t.Errorf("ping from an empty pod: %v, want ErrNoReply", err)
	}
	// Exec refuses namespaces that are not the lab's.
	if _, err := l.Exec(ctx, "", "true"); !errors.Is(err, ErrUnknownNS) {
		t.Errorf("Exec in \"\": %v, want ErrUnknownNS", err)
	}

	// Load sees the same lab.
	ld, err := Load(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ld.Spec, ld.Nodes, *ld.External) != fmt.Sprint(l.Spec, l.Nodes, *l.External) {
		t.Errorf("Load = %+v\nwant %+v", ld, l)
	}

	// Processes: Start, Exited, Stop; a process that ignores SIGTERM is killed.
	p, err := l.Start(ctx, n2.NS, "", "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	if p.Exited() {
		t.Fatal("sleep exited at once")
	}
	if err := p.Stop(); err != nil || !p.Exited() {
		t.Errorf("Stop = %v, exited %v", err, p.Exited())
	}
	log := filepath.Join(l.StateDir(), "trap.log")
	p, err = l.Start(ctx, n2.NS, log, "sh", "-c", `trap "echo got TERM" TERM; echo ready; while :; do sleep 0.1; done`)
	if err != nil {
		t.Fatal(err)
	}
	// The shell says "ready" once its trap is set.
	testutil.WaitFor(t, 10*time.Second, "the shell to get ready", func() (bool, error) {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "ready"), nil
	})
	start := time.Now()
	if err := p.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if d := time.Since(start); d < StopTimeout-time.Second || !p.Exited() {
		t.Errorf("Stop of a TERM-ignoring process took %v, exited %v", d, p.Exited())
	}
	if b, _ := os.ReadFile(log); !strings.Contains(string(b), "ready") || !strings.Contains(string(b), "got TERM") {
		t.Errorf("log: %q", b)
	}

	// Destroy (of the loaded lab, as demo-down does) ends recorded processes
	// and removes everything.
	keep, err := l.Start(ctx, ext.NS, "", "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	select {
	case <-keep.Done():
	case <-time.After(2 * time.Second):
		t.Error("Destroy of the loaded lab did not end a recorded process")
	}
	if left := leftovers(prefix); len(left) != 0 {
		t.Errorf("left after Destroy: %v", left)
	}
	if _, err := os.Stat(l.StateDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir left: %v", err)
	}
	if err := l.Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if _, err := Load(prefix); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load after Destroy: %v, want ErrNotFound", err)
	}
}

// TestCreateCleansUpOnFailure makes Create fail midway (a pod namespace
// name is taken) and checks it removed what it made, and only that.
func TestCreateCleansUpOnFailure(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	prefix := testPrefix(t, "b")
	t.Cleanup(func() { _ = DestroyPrefix(prefix) })

	if _, err := Create(ctx, Spec{Prefix: prefix, Nodes: -1}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("invalid spec: %v", err)
	}
	if left := leftovers(prefix); len(left) != 0 {
		t.Fatalf("invalid spec left %v", left)
	}

	// A taken name (node 2's second pod) is caught before anything is made.
	taken := podNS(prefix, 2, 2)
	if err := createNamed(taken); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deleteNamed(taken) })
	if _, err := Create(ctx, Spec{Prefix: prefix, Nodes: 2, PodsPerNode: 2}); !errors.Is(err, ErrExists) {
		t.Fatalf("Create with a taken name: %v, want ErrExists", err)
	}
	if left := leftovers(prefix); len(left) != 1 || left[0] != NSPath(taken) {
		t.Fatalf("after up-front failure: %v", left)
	}

	// A failure in the middle of building: the context ends after four
	// namespaces (underlay, node 1 and its pod, node 2) exist.
	ctx2, cancel := context.WithCancel(ctx)
	n := 0
	afterNS := func(string) {
		if n++; n == 4 {
			cancel()
		}
	}
	_, err := create(ctx2, afterNS, Spec{Prefix: prefix, Nodes: 3, PodsPerNode: 1, External: true, Projects: []string{"x"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with cancel midway: %v, want context.Canceled", err)
	}
	if n < 4 {
		t.Fatalf("hook ran %d times", n)
	}
	if left := leftovers(prefix); len(left) != 1 || left[0] != NSPath(taken) {
		t.Fatalf("after midway failure: %v", left)
	}
	if _, err := os.Stat(stateDir(prefix)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir left: %v", err)
	}
	// DestroyPrefix removes the taken name too: it is named like ours.
	if err := DestroyPrefix(prefix); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(prefix); len(left) != 0 {
		t.Fatalf("after DestroyPrefix: %v", left)
	}
}
