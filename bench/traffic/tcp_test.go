package traffic

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// listen serves the TCP tool's protocol on a unix socket in a temporary
// directory: the protocol is the same on any stream, and a unix socket keeps
// the test off the host's network.
func listen(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return path
}

func dial(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UnixConn)
}

func TestSendIntact(t *testing.T) {
	path := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, size := range []int64{1, 7, 128 << 10, 1<<20 + 3} {
		res, err := send(ctx, dial(t, path), size, 0)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !res.Intact || res.Bytes != size || res.Duration <= 0 {
			t.Errorf("size %d: %+v", size, res)
		}
	}
	res, err := send(ctx, dial(t, path), 0, 50*time.Millisecond)
	if err != nil || !res.Intact || res.Bytes == 0 || res.Gbps() <= 0 {
		t.Errorf("timed send: %+v, %v", res, err)
	}
}

// TestSendDetectsCorruption puts a relay between client and server that
// changes one byte of the stream: the digest must not match.
func TestSendDetectsCorruption(t *testing.T) {
	path := listen(t)
	relay := filepath.Join(t.TempDir(), "relay")
	l, err := net.Listen("unix", relay)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		in, err := l.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		out, err := net.Dial("unix", path)
		if err != nil {
			return
		}
		defer out.Close()
		go func() { _, _ = io.Copy(in, out) }() // greeting and digest back
		buf := make([]byte, 4096)
		flipped := false
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if !flipped && n > 100 {
					buf[n/2] ^= 0x01
					flipped = true
				}
				if _, werr := out.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				_ = out.(*net.UnixConn).CloseWrite()
				<-stop // keep in open until the client has read the digest
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := send(ctx, dial(t, relay), 1<<20, 0)
	if !errors.Is(err, ErrCorrupt) || res.Intact {
		t.Fatalf("corrupted stream: %+v, %v; want ErrCorrupt", res, err)
	}
}
