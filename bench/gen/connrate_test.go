package gen

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestConnRate runs the short-connection generator against ConnServe on
// loopback: connections succeed and are counted; a closed port fails.
func TestConnRate(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- ConnServe(ctx, l) }()
	r, err := ConnRate(ctx, l.Addr().String(), 300*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Conns < 10 || r.PerSec <= 0 {
		t.Errorf("%+v: want some connections", r)
	}
	cancel()
	if err := <-served; err != nil { // it returns once its listener is closed
		t.Fatal(err)
	}
	if _, err := ConnRate(context.Background(), l.Addr().String(), 100*time.Millisecond, 1); err == nil {
		t.Error("no error with the server gone")
	}
}
