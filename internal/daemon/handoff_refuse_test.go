package daemon

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/handoff"
)

// fakeRunning listens on a handoff socket in a root-only directory as a
// running daemon would and serves one successor with serve.
func fakeRunning(t *testing.T, serve func(c *handoff.Conn)) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the handoff socket is root's")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "handoff.sock")
	l, err := handoff.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := handoff.Accept(l)
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := c.Expect(handoff.TypeHello); err != nil {
			return
		}
		serve(c)
	}()
	return path
}

// TestTakeOverRefusedFailsClosed: a running daemon that answers but does
// not hand over (it aborts, or closes the connection) may still hold the
// node's devices: the successor must not start afresh beside it
// (ErrHandoffRefused), and holds nothing of it afterwards.
func TestTakeOverRefusedFailsClosed(t *testing.T) {
	for name, serve := range map[string]func(c *handoff.Conn){
		"abort":  func(c *handoff.Conn) { _ = c.Send(handoff.TypeAbort, []byte("test: carrying on"), nil) },
		"closes": func(c *handoff.Conn) {},
	} {
		t.Run(name, func(t *testing.T) {
			d := newTestDaemon(t)
			d.cfg.HandoffSocket = fakeRunning(t, serve)
			err := d.up.takeOver()
			if !errors.Is(err, ErrHandoffRefused) {
				t.Fatalf("takeOver: %v, want ErrHandoffRefused", err)
			}
			if d.up.inherit != nil || d.up.tookOver {
				t.Error("an inheritance was kept from a refused handoff")
			}
		})
	}
}

// TestTakeOverStaleSocket: a socket nobody accepts on (the old daemon was
// killed) means nobody runs: start afresh.
func TestTakeOverStaleSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the handoff socket is root's")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "handoff.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	d := newTestDaemon(t)
	d.cfg.HandoffSocket = path
	if err := d.up.takeOver(); err != nil || d.up.inherit != nil {
		t.Fatalf("takeOver over a stale socket: %v (inherit %v), want a fresh start", err, d.up.inherit != nil)
	}
}

// TestTakeOverOtherNode: state for another node is not used; it is kept
// only to be released (Run's fallback asks that daemon to stop).
func TestTakeOverOtherNode(t *testing.T) {
	d := newTestDaemon(t)
	d.cfg.HandoffSocket = fakeRunning(t, func(c *handoff.Conn) {
		st := handoff.State{PID: 1, NodeName: "some-other-node", Subnet: "10.200.0.0/23", CNIListener: -1, ControlListener: -1,
			VXLANRx: []int{0}, VXLANTx: []int{1}, Tun0: []int{2}}
		var fds []int
		for range 3 {
			f, err := os.Open(os.DevNull)
			if err != nil {
				return
			}
			defer f.Close()
			fds = append(fds, int(f.Fd()))
		}
		_ = c.SendState(st, fds, nil)
		_, _, _, _ = c.Recv() // the release
	})
	err := d.up.takeOver()
	if err == nil || errors.Is(err, ErrHandoffRefused) {
		t.Fatalf("takeOver of another node's state: %v, want a mismatch error", err)
	}
	if d.up.inherit == nil || d.up.tookOver {
		t.Fatalf("inherit %v, tookOver %v: want the inheritance kept for the release, not taken over", d.up.inherit != nil, d.up.tookOver)
	}
	if n := d.up.inherit.closeRest(); n != 3 {
		t.Errorf("%d descriptors held, want the 3 received (closed here)", n)
	}
	d.up.inherit.c.Close()
}
