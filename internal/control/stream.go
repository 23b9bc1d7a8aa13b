package control

// Streaming commands (gvsctl capture). The request and the first response
// line are as for every command; when the handler's result is a Stream,
// the connection then carries chunks until the server ends it:
//
//	type (1 byte) | length (4 bytes, big endian) | payload
//
// ChunkData chunks carry the command's output bytes (for capture, a pcap
// stream); one ChunkEnd chunk carries a JSON summary and ends the stream.
// The client asks the server to stop early by closing its side for writing
// (shutdown(SHUT_WR)); the server then still sends the end chunk.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Chunk types.
const (
	ChunkData byte = 'D'
	ChunkEnd  byte = 'E'
)

// MaxChunk is the largest chunk payload accepted.
const MaxChunk = 1 << 20

// ErrBadChunk is returned by ReadChunk for a chunk of an unknown type or
// over MaxChunk.
var ErrBadChunk = errors.New("control: bad stream chunk")

// Stream is a handler result that keeps the connection open: Serve sends
// Header() as the response's Result, then calls ServeStream, which owns c
// until it returns. ServeStream is called even when sending the header
// failed, so that it can release what the stream holds.
type Stream interface {
	Header() any
	ServeStream(ctx context.Context, c net.Conn) error
}

// WriteChunk writes one chunk.
func WriteChunk(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxChunk {
		return fmt.Errorf("%w: %d bytes", ErrBadChunk, len(payload))
	}
	var h [5]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ReadChunk reads one chunk; the payload is read into buf when it fits
// (grown otherwise) and returned.
func ReadChunk(r io.Reader, buf []byte) (typ byte, payload []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if (h[0] != ChunkData && h[0] != ChunkEnd) || n > MaxChunk {
		return 0, nil, fmt.Errorf("%w: type %#x, %d bytes", ErrBadChunk, h[0], n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, fmt.Errorf("control: stream cut short: %w", io.ErrUnexpectedEOF)
	}
	return h[0], buf, nil
}

// StreamConn is the client side of a streaming command, positioned after
// the response line.
type StreamConn struct {
	*net.UnixConn
	r *bufio.Reader
}

// Read reads the stream (chunks; see ReadChunk).
func (s *StreamConn) Read(b []byte) (int, error) { return s.r.Read(b) }

// Open sends a streaming request to the daemon at socket and decodes the
// response's result into out. The caller reads the chunks from the
// returned connection and closes it.
func Open(ctx context.Context, socket string, req Request, out any) (*StreamConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("cannot reach gvs-switchd at %s (is it running? -s names the socket): %w", socket, err)
	}
	uc := c.(*net.UnixConn)
	// ctx bounds the request and the response line (a daemon that accepts
	// but never answers); the stream after it has no deadline.
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		c.Close()
		return nil, fmt.Errorf("control: sending request: %w", err)
	}
	r := bufio.NewReaderSize(c, 64<<10)
	line, err := r.ReadBytes('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("control: reading response: %w", err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		c.Close()
		return nil, fmt.Errorf("control: reading response: %w", err)
	}
	if resp.Error != "" {
		c.Close()
		return nil, errors.New(resp.Error)
	}
	if out != nil && resp.Result != nil {
		if err := json.Unmarshal(resp.Result, out); err != nil {
			c.Close()
			return nil, fmt.Errorf("control: decoding result: %w", err)
		}
	}
	_ = c.SetDeadline(time.Time{})
	return &StreamConn{UnixConn: uc, r: r}, nil
}
