// Package traffic holds gvs-bench's traffic tools. This file is the TCP
// tool: a server that tells each client the address it sees it from, sinks
// its data and answers with a CRC-32C of what it received, and a client that
// sends a pseudo-random stream and checks the digest — so one run measures
// throughput, proves the bytes arrived intact and shows the source address
// after NAT. CRC-32C (hardware-accelerated on amd64 and arm64) catches the
// corruption a broken data path causes — flipped, lost, duplicated or
// reordered bytes — at a cost small enough not to bound the throughput it
// measures; SHA-256 had taken half a core at 3 Gbit/s. It is no defence
// against an adversary, which a benchmark does not need.
package traffic

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/gvswitch/gvs/internal/accept"
)

// Serve accepts TCP clients on l until ctx is done.
func Serve(ctx context.Context, l net.Listener, log *slog.Logger) error {
	return ServeNamed(ctx, l, "", log)
}

// ServeNamed is Serve with a server name in the greeting, which clients
// report (Result.Server): to tell a service's backends apart.
func ServeNamed(ctx context.Context, l net.Listener, name string, log *slog.Logger) error {
	if strings.ContainsAny(name, " \n") {
		return fmt.Errorf("traffic: server name %q has a space or a newline", name)
	}
	return accept.Loop(ctx, l, func(c net.Conn) {
		defer c.Close()
		if log != nil {
			log.Info("tcp client", "remote", c.RemoteAddr()) // the egress IP tests read who connected
		}
		if err := serveConn(c, name); err != nil && log != nil {
			log.Warn("tcp client", "remote", c.RemoteAddr(), "err", err)
		}
	})
}

func serveConn(c net.Conn, name string) error {
	greeting := fmt.Sprintf("gvs-bench %s", c.RemoteAddr())
	if name != "" {
		greeting += " " + name
	}
	if _, err := fmt.Fprintf(c, "%s\n", greeting); err != nil {
		return err
	}
	r := bufio.NewReaderSize(c, 256<<10)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "SEND" {
		return fmt.Errorf("unexpected request %q", line)
	}
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c, "OK %d %s\n", n, hex.EncodeToString(h.Sum(nil)))
	return err
}

// castagnoli is the CRC-32C table both ends of a transfer digest with.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Result is what one client run measured.
type Result struct {
	// SeenAs is the client's address as the server saw it.
	SeenAs string `json:"seenAs"`
	// Server is the server's name, if it has one (ServeNamed).
	Server string `json:"server,omitempty"`
	// Bytes were sent and acknowledged by digest.
	Bytes    int64         `json:"bytes"`
	Duration time.Duration `json:"duration"`
	// Intact reports whether the server's digest matched.
	Intact bool `json:"intact"`
}

// Gbps returns the throughput in Gbit/s.
func (r Result) Gbps() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Bytes) * 8 / r.Duration.Seconds() / 1e9
}

// ErrCorrupt is returned when the server's digest differs from the data sent.
var ErrCorrupt = errors.New("traffic: data arrived corrupted")

// Send connects to addr and sends either size bytes (size > 0) or as much as
// it can for dur, then checks the server's digest.
func Send(ctx context.Context, addr string, size int64, dur time.Duration) (Result, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	return send(ctx, c.(*net.TCPConn), size, dur)
}

// halfCloser is a connection whose sending side can be closed on its own.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// send runs the client's side of one transfer on c.
func send(ctx context.Context, c halfCloser, size int64, dur time.Duration) (Result, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	br := bufio.NewReader(c)
	hello, err := br.ReadString('\n')
	if err != nil {
		return Result{}, fmt.Errorf("reading greeting: %w", err)
	}
	var res Result
	greeting := strings.Fields(strings.TrimPrefix(strings.TrimSpace(hello), "gvs-bench "))
	if len(greeting) > 0 {
		res.SeenAs = greeting[0]
	}
	if len(greeting) > 1 {
		res.Server = greeting[1]
	}
	if _, err := io.WriteString(c, "SEND\n"); err != nil {
		return res, err
	}
	h := crc32.New(castagnoli)
	buf := make([]byte, 128<<10)
	var x uint64 = 0x9e3779b97f4a7c15
	start := time.Now()
	for size <= 0 || res.Bytes < size {
		if size <= 0 && time.Since(start) >= dur {
			break
		}
		chunk := buf
		if size > 0 && size-res.Bytes < int64(len(chunk)) {
			chunk = chunk[:size-res.Bytes]
		}
		fill(chunk, &x)
		h.Write(chunk)
		n, err := c.Write(chunk)
		res.Bytes += int64(n)
		if err != nil {
			return res, err
		}
	}
	if err := c.CloseWrite(); err != nil {
		return res, err
	}
	reply, err := br.ReadString('\n')
	res.Duration = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("reading digest: %w", err)
	}
	f := strings.Fields(reply)
	if len(f) != 3 || f[0] != "OK" {
		return res, fmt.Errorf("bad reply %q", reply)
	}
	got, _ := strconv.ParseInt(f[1], 10, 64)
	res.Intact = got == res.Bytes && f[2] == hex.EncodeToString(h.Sum(nil))
	if !res.Intact {
		return res, fmt.Errorf("%w: sent %d bytes, server got %d", ErrCorrupt, res.Bytes, got)
	}
	return res, nil
}

// fill writes xorshift64 output into b, continuing the sequence in *x.
func fill(b []byte, x *uint64) {
	v := *x
	for i := 0; i+8 <= len(b); i += 8 {
		v ^= v << 13
		v ^= v >> 7
		v ^= v << 17
		b[i], b[i+1], b[i+2], b[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(v >> (8 * (i & 7)))
	}
	*x = v
}
