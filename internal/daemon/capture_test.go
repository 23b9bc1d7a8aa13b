package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/port"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// feedPort delivers one frame per Read, forever, until closed.
type feedPort struct {
	frame  []byte
	closed chan struct{}
}

func (p *feedPort) Name() string                                        { return "feed0" }
func (p *feedPort) Caps() port.Caps                                     { return port.Caps{} }
func (p *feedPort) BatchSize() int                                      { return 1 }
func (p *feedPort) Write(b [][]byte, _ []port.Meta, _ int) (int, error) { return len(b), nil }
func (p *feedPort) Close() error                                        { close(p.closed); return nil }
func (p *feedPort) Read(bufs [][]byte, meta []port.Meta, off int) (int, error) {
	select {
	case <-p.closed:
		return 0, errors.New("closed")
	case <-time.After(time.Millisecond):
	}
	meta[0] = port.Meta{Size: copy(bufs[0][off:], p.frame)}
	return 1, nil
}

// newTestDaemon returns a daemon built from goodConfig, not running, whose
// switch is closed at cleanup.
func newTestDaemon(t *testing.T) *Daemon {
	t.Helper()
	cfg, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.dp.sw.Close() })
	return d
}

// testDaemon is newTestDaemon with a port 3 that keeps feeding one frame.
func testDaemon(t *testing.T) *Daemon {
	t.Helper()
	d := newTestDaemon(t)
	frame := make([]byte, 60)
	copy(frame, []byte{0x0a, 0x58, 10, 128, 0, 9, 0x0a, 0x58, 10, 128, 0, 3, 0x08, 0x06})
	if err := d.dp.sw.AddPort(3, &feedPort{frame: frame, closed: make(chan struct{})}); err != nil {
		t.Fatal(err)
	}
	return d
}

// runCapture runs a capture stream over a pipe and returns the pcap bytes
// and the summary.
func runCapture(t *testing.T, d *Daemon, req control.CaptureRequest) ([]byte, control.CaptureSummary) {
	t.Helper()
	s, err := d.startCapture(&req)
	if err != nil {
		t.Fatal(err)
	}
	srv, cli := net.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _ = s.ServeStream(ctx, srv); srv.Close() }()
	var pcap bytes.Buffer
	var sum control.CaptureSummary
	for {
		typ, p, err := control.ReadChunk(cli, nil)
		if err != nil {
			t.Fatalf("after %d bytes: %v", pcap.Len(), err)
		}
		if typ == control.ChunkEnd {
			if err := json.Unmarshal(p, &sum); err != nil {
				t.Fatal(err)
			}
			return pcap.Bytes(), sum
		}
		pcap.Write(p)
	}
}

func countPackets(t *testing.T, b []byte) int {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != 60 {
			t.Errorf("packet %d has %d bytes, want 60", n, len(data))
		}
		n++
	}
}

func TestCaptureStream(t *testing.T) {
	d := testDaemon(t)
	b, sum := runCapture(t, d, control.CaptureRequest{Port: "feed0", Count: 5})
	if n := countPackets(t, b); n != 5 || sum.Written != 5 || sum.Reason != "count" || sum.Captured < 5 {
		t.Errorf("count 5: %d packets in the file, summary %+v", n, sum)
	}
	b, sum = runCapture(t, d, control.CaptureRequest{Port: "3", Seconds: 0.2, Dir: "in"})
	if n := countPackets(t, b); n == 0 || uint64(n) != sum.Written || sum.Reason != "duration" {
		t.Errorf("0.2 s: %d packets in the file, summary %+v", n, sum)
	}
	// Nothing is ever written to the feed port: an out capture is empty.
	b, sum = runCapture(t, d, control.CaptureRequest{Port: "3", Seconds: 0.1, Dir: "out"})
	if n := countPackets(t, b); n != 0 || sum.Captured != 0 {
		t.Errorf("out: %d packets, summary %+v", n, sum)
	}
	for _, bad := range []control.CaptureRequest{{Port: "7"}, {Port: "nosuch"}, {Port: "3", Dir: "up"}, {Port: "3", Count: -1}, {Port: "3", Snaplen: 10}} {
		if _, err := d.startCapture(&bad); err == nil {
			t.Errorf("capture %+v was accepted", bad)
		}
	}
	if got := d.dp.sw.CaptureTotals(); got.Active != 0 || got.Captured == 0 {
		t.Errorf("capture totals %+v", got)
	}
}

// A client that reads nothing (stopped, or behind a full pipe) must not hold
// the port's capture, and a goroutine of the daemon, forever.
func TestCaptureStreamStalledClient(t *testing.T) {
	d := testDaemon(t)
	st, err := d.startCapture(&control.CaptureRequest{Port: "3"})
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*captureStream)
	s.writeTimeout = 50 * time.Millisecond
	srv, cli := net.Pipe() // nobody reads cli
	defer cli.Close()
	defer srv.Close()
	done := make(chan error, 1)
	go func() { done <- s.ServeStream(context.Background(), srv) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a stream nobody reads ended without an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream still waits for a client that reads nothing")
	}
	if got := d.dp.sw.CaptureTotals(); got.Active != 0 {
		t.Errorf("capture still running after its client stalled: %+v", got)
	}
	if _, err := d.startCapture(&control.CaptureRequest{Port: "3"}); err != nil {
		t.Errorf("port 3 after a stalled capture: %v", err)
	}
}

// The daemon stopping cancels the stream's context and then closes the
// switch; the summary must say the daemon stopped, not that the port went.
func TestCaptureStopReason(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := stopReason(ctx, vswitch.ErrCaptureStopped); got != "daemon stopping" {
		t.Errorf("daemon stop: reason %q", got)
	}
	if got := stopReason(context.Background(), vswitch.ErrCaptureStopped); got != "port removed" {
		t.Errorf("port removal: reason %q", got)
	}
	dctx, dcancel := context.WithTimeoutCause(context.Background(), 0, errDuration)
	defer dcancel()
	<-dctx.Done()
	if got := stopReason(dctx, dctx.Err()); got != "duration" {
		t.Errorf("duration: reason %q", got)
	}
}

// Pod names are unique within a project only: a name two pods share is
// refused, naming both, rather than capturing whichever comes first.
func TestCapturePortByPodName(t *testing.T) {
	d := testDaemon(t)
	if err := d.dp.sw.AddPort(4, &feedPort{frame: make([]byte, 60), closed: make(chan struct{})}); err != nil {
		t.Fatal(err)
	}
	pods := []Pod{{Name: "web", Project: "alpha", Port: 3}, {Name: "web", Project: "beta", Port: 4}, {Name: "db", Project: "beta", Port: 4}}
	if no, _, err := resolvePort("db", d.dp.sw.Ports(), pods); err != nil || no != 4 {
		t.Errorf("db: port %d, %v; want 4", no, err)
	}
	_, _, err := resolvePort("web", d.dp.sw.Ports(), pods)
	if err == nil || !strings.Contains(err.Error(), "port 3 in project alpha") || !strings.Contains(err.Error(), "port 4 in project beta") {
		t.Errorf("web, two pods: %v; want an error naming both", err)
	}
	pods = slices.Delete(pods, 1, 2)
	if no, name, err := resolvePort("web", d.dp.sw.Ports(), pods); err != nil || no != 3 || name != "feed0" {
		t.Errorf("web, one pod: port %d (%s), %v; want 3 (feed0)", no, name, err)
	}
}
