package tap

import (
	"testing"
	"time"
)

// TestFdGuard: close waits for the use in progress and refuses new ones.
func TestFdGuard(t *testing.T) {
	var g fdGuard
	if !g.acquire() {
		t.Fatal("a new guard refuses a use")
	}
	closed := make(chan struct{})
	go func() {
		g.close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("close returned with a use in progress")
	case <-time.After(50 * time.Millisecond):
	}
	if g.acquire() {
		t.Error("a closing guard allowed a new use")
	}
	g.release()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not return once the use ended")
	}
	if g.acquire() {
		t.Error("a closed guard allowed a use")
	}
}
