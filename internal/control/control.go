// Package control is the protocol between gvsctl (and other local tools) and
// gvs-switchd: one JSON request and one JSON response per connection over
// the daemon's unix socket.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/gvswitch/gvs/internal/accept"
)

// DefaultSocket is where gvs-switchd listens unless configured otherwise.
const DefaultSocket = "/run/gvs/gvs.sock"

// Request is one command for the daemon.
type Request struct {
	// Command names the operation: show, dump-ports, dump-flows, add-flows,
	// del-flows, trace, stats.
	Command string `json:"command"`
	// Args is the command's argument text: rules for add-flows, a filter
	// for dump-flows and del-flows, a packet description for trace.
	Args string `json:"args,omitempty"`
	// Strict asks del-flows for strict matching.
	Strict bool `json:"strict,omitempty"`
	// Capture holds the parameters of "capture" (a streaming command,
	// stream.go).
	Capture *CaptureRequest `json:"capture,omitempty"`
}

// Response is the daemon's answer. Error is empty on success; Result holds
// the command's result as JSON.
type Response struct {
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Handler answers one request.
type Handler func(ctx context.Context, req Request) (any, error)

// ErrUnknownCommand is returned by handlers for a command they do not know.
var ErrUnknownCommand = errors.New("unknown command")

// Serve accepts connections on l until ctx is done, answering each request
// with h. Each connection carries one request.
func Serve(ctx context.Context, l net.Listener, h Handler, log *slog.Logger) error {
	err := accept.Loop(ctx, l, func(c net.Conn) { serveConn(ctx, c, h, log) })
	if err != nil {
		return fmt.Errorf("control: accept: %w", err)
	}
	return nil
}

func serveConn(ctx context.Context, c net.Conn, h Handler, log *slog.Logger) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
	var req Request
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		writeResponse(c, Response{Error: "bad request: " + err.Error()})
		return
	}
	res, err := h(ctx, req)
	if s, ok := res.(Stream); ok && err == nil {
		_ = c.SetDeadline(time.Time{}) // streams last as long as they need
		if err := writeResult(c, s.Header()); err != nil && log != nil {
			log.Debug("control: writing stream header", "err", err)
		}
		if err := s.ServeStream(ctx, c); err != nil && log != nil {
			log.Debug("control: stream ended", "command", req.Command, "err", err)
		}
		return
	}
	var resp Response
	if err != nil {
		resp.Error = err.Error()
	} else if res != nil {
		b, err := json.Marshal(res)
		if err != nil {
			resp.Error = "encoding result: " + err.Error()
		} else {
			resp.Result = b
		}
	}
	if err := writeResponse(c, resp); err != nil && log != nil {
		log.Debug("control: writing response", "err", err)
	}
}

// writeResult writes a successful response holding res.
func writeResult(c net.Conn, res any) error {
	b, err := json.Marshal(res)
	if err != nil {
		return writeResponse(c, Response{Error: "encoding result: " + err.Error()})
	}
	return writeResponse(c, Response{Result: b})
}

func writeResponse(c net.Conn, r Response) error {
	return json.NewEncoder(c).Encode(r)
}

// Listen creates the unix socket at path (removing a stale one), readable
// and writable by its owner only.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("control: %s is in use by a running daemon", path)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("control: %w", err)
	}
	return l, nil
}

// Call sends req to the daemon at socket and decodes its result into out
// (which may be nil).
func Call(ctx context.Context, socket string, req Request, out any) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("cannot reach gvs-switchd at %s (is it running? -s names the socket): %w", socket, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return fmt.Errorf("control: sending request: %w", timedOut(socket, req, err))
	}
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return fmt.Errorf("control: reading response: %w", timedOut(socket, req, err))
	}
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	if out != nil && resp.Result != nil {
		if err := json.Unmarshal(resp.Result, out); err != nil {
			return fmt.Errorf("control: decoding result: %w", err)
		}
	}
	return nil
}

// timedOut says which daemon did not answer which command in time when err
// is the connection's deadline (the caller's context), and returns err as
// it is otherwise.
func timedOut(socket string, req Request, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("gvs-switchd at %s did not answer %q in time (gvsctl -timeout sets the bound): %w", socket, req.Command, err)
	}
	return err
}

// Refuse answers a connection the daemon will not serve (its process may
// not use the socket) with err, in the protocol's terms.
func Refuse(c net.Conn, err error) { _ = writeResponse(c, Response{Error: err.Error()}) }
