package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServeCall(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, l, func(_ context.Context, req Request) (any, error) {
			switch req.Command {
			case "echo":
				return CountResult{Count: len(req.Args)}, nil
			case "fail":
				return nil, errors.New("it failed")
			}
			return nil, fmt.Errorf("%w %q", ErrUnknownCommand, req.Command)
		}, nil)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	var r CountResult
	if err := Call(cctx, sock, Request{Command: "echo", Args: "hello"}, &r); err != nil || r.Count != 5 {
		t.Fatalf("echo: %+v, %v", r, err)
	}
	if err := Call(cctx, sock, Request{Command: "fail"}, nil); err == nil || err.Error() != "it failed" {
		t.Fatalf("fail: %v", err)
	}
	if err := Call(cctx, sock, Request{Command: "nope"}, nil); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("unknown: %v", err)
	}
	// A second daemon must not steal a live socket.
	if _, err := Listen(sock); err == nil {
		t.Fatal("Listen on a socket in use succeeded")
	}
	// A missing daemon says how to fix it.
	err = Call(cctx, filepath.Join(t.TempDir(), "none.sock"), Request{Command: "show"}, nil)
	if err == nil || !strings.Contains(err.Error(), "is it running") {
		t.Fatalf("missing daemon: %v", err)
	}
}

// FuzzRequest feeds arbitrary bytes to the request decoder the server uses:
// it must fail cleanly or give a request that encodes again.
func FuzzRequest(f *testing.F) {
	f.Add([]byte(`{"command":"trace","args":"in_port=3,ip"}`))
	f.Add([]byte(`{"command":"del-flows","strict":true}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		if json.Unmarshal(b, &r) != nil {
			return
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("decoded request does not encode: %v", err)
		}
	})
}

// A daemon that takes the connection and never answers (stuck, or being
// stopped) does not hold the caller past its context: Call fails at the
// deadline and says which daemon and command.
func TestCallBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "stuck.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered, until the test ends
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = Call(ctx, sock, Request{Command: "pods"}, nil)
	if err == nil || !strings.Contains(err.Error(), "did not answer \"pods\" in time") || !strings.Contains(err.Error(), sock) {
		t.Fatalf("a daemon that never answers: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Call returned after %v, its bound was 200ms", d)
	}
}
