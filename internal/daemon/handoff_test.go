package daemon

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// echo serves l: each connection gets its first line back.
func echo(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			line, _ := bufio.NewReader(c).ReadString('\n')
			_, _ = c.Write([]byte(line))
		}()
	}
}

func call(t *testing.T, path, msg string) (string, error) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// TestPausableListenerHandOver: a request that comes while the listener
// is paused waits in the socket's backlog and is answered by the
// successor, which accepts on the same socket (a duplicate of its
// descriptor, as SCM_RIGHTS gives it); the old one's closing leaves the
// path in place.
func TestPausableListenerHandOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	old := &pausableListener{ul: ul, guarded: ul}
	go echo(old)
	if got, err := call(t, path, "one"); err != nil || got != "one\n" {
		t.Fatalf("before the pause: %q %v", got, err)
	}
	if err := old.pause(time.Second); err != nil {
		t.Fatal(err)
	}
	answer := make(chan string, 1)
	go func() {
		got, err := call(t, path, "two")
		if err != nil {
			got = err.Error()
		}
		answer <- got
	}()
	select {
	case got := <-answer:
		t.Fatalf("answered while paused: %q", got)
	case <-time.After(100 * time.Millisecond):
	}
	f, err := ul.File() // what the successor receives
	if err != nil {
		t.Fatal(err)
	}
	old.handOver()
	nl, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	go echo(nl)
	if got := <-answer; got != "two\n" {
		t.Fatalf("the request made while paused: %q", got)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the socket's path after the old listener closed: %v", err)
	}
}

// TestPausableListenerResume: a paused listener that resumes answers the
// request that waited.
func TestPausableListenerResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l := &pausableListener{ul: ul, guarded: ul}
	defer l.Close()
	go echo(l)
	if err := l.pause(time.Second); err != nil {
		t.Fatal(err)
	}
	// The request is connected and written while the listener is paused:
	// it waits in the backlog, and nothing has accepted it yet.
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	l.resume()
	if got, err := bufio.NewReader(c).ReadString('\n'); got != "x\n" {
		t.Fatalf("after resume: %q (%v)", got, err)
	}
}
