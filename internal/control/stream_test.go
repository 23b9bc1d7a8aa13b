package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// countStream sends numbered data chunks until the client closes its side,
// then an end chunk with the count.
type countStream struct{}

func (countStream) Header() any { return CaptureStart{Name: "numbers"} }

func (countStream) ServeStream(_ context.Context, c net.Conn) error {
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, c); close(stop) }()
	n := 0
	for {
		select {
		case <-stop:
			b, _ := json.Marshal(CaptureSummary{Written: uint64(n), Reason: "client"})
			return WriteChunk(c, ChunkEnd, b)
		default:
		}
		if err := WriteChunk(c, ChunkData, []byte{byte(n)}); err != nil {
			return err
		}
		n++
		time.Sleep(time.Millisecond) // pacing: a chunk a millisecond
	}
}

func TestStream(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = Serve(ctx, l, func(_ context.Context, req Request) (any, error) {
			if req.Command == "count" {
				return countStream{}, nil
			}
			return nil, ErrUnknownCommand
		}, nil)
	}()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	if _, err := Open(cctx, sock, Request{Command: "nope"}, nil); err == nil {
		t.Fatal("unknown streaming command succeeded")
	}
	var start CaptureStart
	s, err := Open(cctx, sock, Request{Command: "count"}, &start)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if start.Name != "numbers" {
		t.Errorf("header %+v", start)
	}
	var buf []byte
	for i := 0; i < 5; i++ {
		typ, p, err := ReadChunk(s, buf)
		if err != nil || typ != ChunkData || !bytes.Equal(p, []byte{byte(i)}) {
			t.Fatalf("chunk %d: %c %v %v", i, typ, p, err)
		}
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	for {
		typ, p, err := ReadChunk(s, buf)
		if err != nil {
			t.Fatal(err)
		}
		if typ == ChunkEnd {
			var sum CaptureSummary
			if err := json.Unmarshal(p, &sum); err != nil || sum.Reason != "client" || sum.Written < 5 {
				t.Errorf("summary %s: %v", p, err)
			}
			break
		}
	}
}

func TestChunkErrors(t *testing.T) {
	if err := WriteChunk(io.Discard, ChunkData, make([]byte, MaxChunk+1)); !errors.Is(err, ErrBadChunk) {
		t.Errorf("oversized chunk: %v", err)
	}
	for _, b := range [][]byte{{'X', 0, 0, 0, 0}, {'D', 0xff, 0, 0, 0}} {
		if _, _, err := ReadChunk(bytes.NewReader(b), nil); !errors.Is(err, ErrBadChunk) {
			t.Errorf("%x: %v", b, err)
		}
	}
	if _, _, err := ReadChunk(bytes.NewReader([]byte{'D', 0, 0, 0, 9, 1}), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut chunk: %v", err)
	}
}

// FuzzReadChunk: chunks that ReadChunk accepts are written back the same.
func FuzzReadChunk(f *testing.F) {
	f.Add([]byte{'D', 0, 0, 0, 3, 1, 2, 3})
	f.Add([]byte{'E', 0, 0, 0, 2, '{', '}'})
	f.Add([]byte{'D', 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, p, err := ReadChunk(bytes.NewReader(b), nil)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteChunk(&out, typ, p); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), b[:out.Len()]) {
			t.Fatalf("round trip: %x, want %x", out.Bytes(), b[:out.Len()])
		}
	})
}

// Open gives up at ctx's deadline when the daemon accepts the connection
// but never answers, rather than waiting forever.
func TestOpenDeadline(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mute.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c) // reads the request, answers nothing
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		s, err := Open(ctx, sock, Request{Command: "capture"}, nil)
		if s != nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Open succeeded without a response")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Open still waits for a daemon that never answers")
	}
}
