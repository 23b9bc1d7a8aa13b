package why_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/why"
)

// TestListenerBoundsStrangers: clients that connect and never complete a
// handshake reach neither Accept nor the handler, at most MaxHandshakes of
// them are held, the next is closed at once, and once they go an
// administrator is served again.
func TestListenerBoundsStrangers(t *testing.T) {
	p := newTestPKI(t)
	cfg, err := why.ServerConfig(p.node("b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	inner := newPipeListener()
	var handled atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		h := func(context.Context, control.Request) (any, error) { handled.Add(1); return []struct{}{}, nil }
		_ = control.Serve(ctx, why.NewListener(inner, cfg), why.Handler(h), nil)
		close(done)
	}()
	t.Cleanup(func() { cancel(); inner.Close(); <-done })

	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for range why.MaxHandshakes {
		c, err := inner.dial(ctx, nodeAddrs["b"])
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c) // connects, says nothing
	}
	extra, err := inner.dial(ctx, nodeAddrs["b"])
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("a connection beyond MaxHandshakes: read %v, want EOF (closed at once)", err)
	}
	for _, c := range idle {
		c.Close()
	}
	idle = nil
	r := &why.Remote{TLS: p.client(pki.AdminUser), Nodes: nodeAddrs, Dial: inner.dial}
	var err2 error
	// The strangers' slots free as their handshakes fail on the closed
	// connections.
	if !testutil.Eventually(5*time.Second, func() bool { _, err2 = r.Pods(ctx, "b"); return err2 == nil }) {
		t.Fatalf("the administrator after the strangers left: %v", err2)
	}
	if n := handled.Load(); n != 1 {
		t.Errorf("the handler answered %d requests, want 1 (the administrator's)", n)
	}
}
