package accept

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestLoop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{}, 2)
	done := make(chan error, 1)
	go func() {
		done <- Loop(ctx, l, func(c net.Conn) { c.Close(); served <- struct{}{} })
	}()
	for range 2 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatal("connection not served")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Loop after cancel: %v, want nil", err)
	}
}

// TestLoopAcceptError: an accept error that is not the end of ctx is
// returned.
func TestLoopAcceptError(t *testing.T) {
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := Loop(context.Background(), l, func(c net.Conn) { c.Close() }); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Loop on a closed listener: %v, want net.ErrClosed", err)
	}
}
