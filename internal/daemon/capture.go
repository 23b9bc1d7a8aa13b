package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/internal/pcap"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// flushBytes is how much pcap data a capture stream gathers before it sends
// a chunk; it sends earlier whenever the capture queue is empty.
const flushBytes = 64 << 10

// streamWriteTimeout is how long a capture stream waits for a client that
// reads nothing (stopped, or wedged behind a full pipe) before it gives up
// and frees the port's capture for others.
const streamWriteTimeout = 30 * time.Second

// startCapture answers "capture": it starts a capture on the requested
// port and returns the stream that sends it to the client as pcap.
func (d *Daemon) startCapture(req *control.CaptureRequest) (control.Stream, error) {
	if req == nil {
		return nil, errors.New("capture: no parameters")
	}
	no, name, err := resolvePort(req.Port, d.dp.sw.Ports(), d.Pods())
	if err != nil {
		return nil, err
	}
	dir, err := vswitch.ParseCaptureDir(req.Dir)
	if err != nil {
		return nil, err
	}
	if req.Count < 0 || req.Seconds < 0 {
		return nil, errors.New("capture: count and duration must not be negative")
	}
	snap := req.Snaplen
	if snap == 0 {
		snap = vswitch.DefaultSnaplen
	}
	c, err := d.dp.sw.StartCapture(no, vswitch.CaptureConfig{Dir: dir, Snaplen: snap})
	if err != nil {
		return nil, err
	}
	return &captureStream{c: c, req: *req, writeTimeout: streamWriteTimeout,
		start: control.CaptureStart{Port: no, Name: name, Dir: dir.String(), Snaplen: snap}}, nil
}

// resolvePort finds a port by number, port name or the name of one of pods.
func resolvePort(s string, ports []vswitch.PortInfo, pods []Pod) (uint32, string, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		for _, p := range ports {
			if p.No == uint32(n) {
				return p.No, p.Name, nil
			}
		}
		return 0, "", fmt.Errorf("capture: no port %d (gvsctl dump-ports lists them)", n)
	}
	for _, p := range ports {
		if p.Name == s {
			return p.No, p.Name, nil
		}
	}
	// Pod names are unique within a project only: of two pods of one
	// name, capture neither rather than silently the first.
	names := map[uint32]string{}
	for _, q := range ports {
		names[q.No] = q.Name
	}
	var found []Pod
	for _, p := range pods {
		if _, on := names[p.Port]; on && p.Name == s {
			found = append(found, p)
		}
	}
	if len(found) == 1 {
		return found[0].Port, names[found[0].Port], nil
	}
	if len(found) == 0 {
		return 0, "", fmt.Errorf("capture: no port or pod named %q (gvsctl dump-ports lists them)", s)
	}
	var which []string
	for _, p := range found {
		which = append(which, fmt.Sprintf("port %d in project %s", p.Port, p.Project))
	}
	return 0, "", fmt.Errorf("capture: %d pods are named %q (%s): give the port number", len(found), s, strings.Join(which, ", "))
}

// captureStream sends a capture to the client: pcap in data chunks, then
// the summary.
type captureStream struct {
	c     *vswitch.Capture
	req   control.CaptureRequest
	start control.CaptureStart
	// writeTimeout bounds each write to the client (streamWriteTimeout).
	writeTimeout time.Duration
}

func (s *captureStream) Header() any { return s.start }

func (s *captureStream) ServeStream(ctx context.Context, conn net.Conn) error {
	defer s.c.Stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if s.req.Seconds > 0 {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeoutCause(ctx, time.Duration(s.req.Seconds*float64(time.Second)), errDuration)
		defer c2()
	}
	// The client closes its side to stop the capture (or goes away).
	go func() {
		_, _ = io.Copy(io.Discard, conn)
		cancel(errClient)
	}()
	var buf bytes.Buffer
	w, err := pcap.NewWriter(&buf, s.start.Snaplen)
	if err != nil {
		return err
	}
	if err := s.flush(conn, &buf); err != nil { // the file header, at once
		return err
	}
	var written uint64
	reason := "count"
	for s.req.Count == 0 || written < uint64(s.req.Count) {
		f, err := s.c.Next(ctx)
		if err != nil {
			reason = stopReason(ctx, err)
			break
		}
		err = w.WritePacket(f.Time, f.OrigLen, f.Data)
		s.c.Release(f)
		if err != nil {
			reason = err.Error()
			break
		}
		written++
		if buf.Len() >= flushBytes || s.c.Pending() == 0 {
			if err := s.flush(conn, &buf); err != nil {
				return err // the client is gone, or reads nothing
			}
		}
	}
	s.c.Stop()
	if err := s.flush(conn, &buf); err != nil {
		return err
	}
	st := s.c.Stats()
	b, _ := json.Marshal(control.CaptureSummary{Captured: st.Captured, Dropped: st.Dropped, Written: written, Reason: reason})
	_ = conn.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	return control.WriteChunk(conn, control.ChunkEnd, b)
}

// flush sends buf's bytes, giving the client writeTimeout to take them.
func (s *captureStream) flush(conn net.Conn, buf *bytes.Buffer) error {
	_ = conn.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	return flushChunk(conn, buf)
}

var (
	errDuration = errors.New("duration")
	errClient   = errors.New("client")
)

// stopReason says why Next ended the capture. The context comes first: a
// daemon that stops cancels it and then closes the switch, which stops the
// capture too, and that is not a removed port.
func stopReason(ctx context.Context, err error) string {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errDuration):
		return "duration"
	case errors.Is(cause, errClient):
		return "client"
	case cause != nil:
		return "daemon stopping"
	}
	if errors.Is(err, vswitch.ErrCaptureStopped) {
		return "port removed"
	}
	return err.Error()
}

// flushChunk sends buf's bytes (whole pcap records) as data chunks.
func flushChunk(conn net.Conn, buf *bytes.Buffer) error {
	for buf.Len() > 0 {
		n := min(buf.Len(), control.MaxChunk)
		if err := control.WriteChunk(conn, control.ChunkData, buf.Next(n)); err != nil {
			return err
		}
	}
	buf.Reset()
	return nil
}
