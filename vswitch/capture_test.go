package vswitch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/port"
)

// captureWorker is batchWorker with the tunnel frames sent with VNI 42 to
// node 192.0.2.2.
func captureWorker(t testing.TB) *worker {
	t.Helper()
	w, _ := batchWorker(t, "load:42->NXM_NX_TUN_ID[0..31], set_field:192.0.2.2->tun_dst, output:1")
	return w
}

func drain(t *testing.T, c *Capture) []CapturedFrame {
	t.Helper()
	var out []CapturedFrame
	for c.Pending() > 0 {
		f, err := c.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, CapturedFrame{Time: f.Time, Dir: f.Dir, OrigLen: f.OrigLen, Data: bytes.Clone(f.Data)})
		c.Release(f)
	}
	return out
}

func TestCaptureRxTx(t *testing.T) {
	w := captureWorker(t)
	rx, err := w.s.StartCapture(3, CaptureConfig{Dir: CaptureRx})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := w.s.StartCapture(1, CaptureConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.s.StartCapture(3, CaptureConfig{}); !errors.Is(err, ErrCaptureBusy) {
		t.Errorf("second capture on port 3: %v, want ErrCaptureBusy", err)
	}
	if _, err := w.s.StartCapture(7, CaptureConfig{}); !errors.Is(err, ErrNoSuchPort) {
		t.Errorf("capture on port 7: %v, want ErrNoSuchPort", err)
	}
	n := len(w.bufs)
	w.process(n)

	got := drain(t, rx)
	if len(got) != n {
		t.Fatalf("rx capture has %d frames, want %d", len(got), n)
	}
	for i, f := range got {
		want := w.bufs[i][Headroom : Headroom+w.meta[i].Size]
		if f.Dir != CaptureRx || f.OrigLen != len(want) || !bytes.Equal(f.Data, want) {
			t.Fatalf("rx frame %d: dir %v len %d\n got %x\nwant %x", i, f.Dir, f.OrigLen, f.Data, want)
		}
	}

	got = drain(t, tx)
	if len(got) != n/2 {
		t.Fatalf("tunnel capture has %d frames, want %d", len(got), n/2)
	}
	// Each frame sent into the tunnel is behind the outer header the port
	// gave it (testFramer): sent, to 192.0.2.2 with VNI 42, with the
	// frame's flow hash and size.
	frame := udpFrame(3, 9)
	var fl flowtable.Fields
	flowtable.Extract(frame, &fl)
	for _, f := range got {
		h := f.Data[:testWireLen]
		if h[0] != 't' || [4]byte(h[1:5]) != [4]byte{192, 0, 2, 2} || binary.BigEndian.Uint32(h[5:]) != 42 ||
			binary.BigEndian.Uint32(h[9:]) != FlowHash(&fl) || int(binary.BigEndian.Uint32(h[13:])) != len(frame) {
			t.Errorf("tunnel frame's outer header %x", h)
		}
		if f.Dir != CaptureTx || f.OrigLen != testWireLen+len(frame) || !bytes.Equal(f.Data[testWireLen:], frame) {
			t.Errorf("tunnel frame: dir %v, orig %d, %x", f.Dir, f.OrigLen, f.Data)
		}
	}
	if st := tx.Stats(); st.Captured != uint64(n/2) || st.Dropped != 0 {
		t.Errorf("tunnel capture stats %+v", st)
	}
	rx.Stop()
	tx.Stop()
	rx.Stop() // idempotent
	if _, err := rx.Next(context.Background()); !errors.Is(err, ErrCaptureStopped) {
		t.Errorf("Next after Stop: %v", err)
	}
	if tot := w.s.CaptureTotals(); tot.Captured != uint64(n+n/2) || tot.Active != 0 {
		t.Errorf("totals %+v", tot)
	}
	// A stopped capture no longer sees frames, and the port takes a new one.
	w.process(n)
	if rx.Pending() != 0 {
		t.Error("a stopped capture still receives frames")
	}
	if c, err := w.s.StartCapture(3, CaptureConfig{}); err != nil {
		t.Error(err)
	} else {
		c.Stop()
	}
}

// TestCaptureTunnelRx: frames read from a tunnel port are captured behind
// the outer header the port says they came with (received, from the
// remote endpoint of their Meta).
func TestCaptureTunnelRx(t *testing.T) {
	w0 := captureWorker(t)
	e := (*w0.s.ports.Load())[1]
	w := w0.s.newWorker(e, e.q[0])
	frame := udpFrame(9, 3)
	w.meta[0] = port.Meta{Size: copy(w.bufs[0][Headroom:], frame), Tunnel: port.Endpoint{Addr: [4]byte{192, 0, 2, 7}, Port: 40000, VNI: 5}}
	c, err := w.s.StartCapture(1, CaptureConfig{Dir: CaptureRx})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	w.process(1)
	got := drain(t, c)
	if len(got) != 1 {
		t.Fatalf("%d frames captured, want 1", len(got))
	}
	h := got[0].Data[:testWireLen]
	if h[0] != 'r' || [4]byte(h[1:5]) != [4]byte{192, 0, 2, 7} || binary.BigEndian.Uint32(h[5:]) != 5 ||
		!bytes.Equal(got[0].Data[testWireLen:], frame) {
		t.Errorf("captured %x", got[0].Data)
	}
}

func TestCaptureDropsWhenFull(t *testing.T) {
	w := captureWorker(t)
	c, err := w.s.StartCapture(3, CaptureConfig{Dir: CaptureRx, Queue: 4, Snaplen: MinSnaplen})
	if err != nil {
		t.Fatal(err)
	}
	w.process(len(w.bufs))
	st := c.Stats()
	if st.Captured != 4 || st.Dropped != uint64(len(w.bufs)-4) {
		t.Errorf("stats %+v, want 4 captured and %d dropped", st, len(w.bufs)-4)
	}
	if tot := w.s.CaptureTotals(); tot.Dropped != st.Dropped || tot.Active != 1 {
		t.Errorf("totals %+v", tot)
	}
	c.Stop()
}

func TestCaptureSnaplen(t *testing.T) {
	w := captureWorker(t)
	if _, err := w.s.StartCapture(3, CaptureConfig{Snaplen: 10}); err == nil {
		t.Error("a snap length of 10 was accepted")
	}
	c, err := w.s.StartCapture(1, CaptureConfig{Snaplen: MinSnaplen})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	w.process(len(w.bufs))
	for _, f := range drain(t, c) {
		if len(f.Data) != MinSnaplen || f.OrigLen != testWireLen+len(udpFrame(3, 9)) {
			t.Fatalf("truncated frame: %d bytes of %d", len(f.Data), f.OrigLen)
		}
	}
}

// TestCaptureAllocs: a running capture whose reader keeps up allocates
// nothing once its buffers exist; with no capture the worker's cost is in
// TestProcessAllocs.
func TestCaptureAllocs(t *testing.T) {
	w := captureWorker(t)
	rx, err := w.s.StartCapture(3, CaptureConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := w.s.StartCapture(1, CaptureConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	batch := func() {
		w.process(len(w.bufs))
		for _, c := range []*Capture{rx, tx} {
			for c.Pending() > 0 {
				f, _ := c.Next(ctx)
				c.Release(f)
			}
		}
	}
	batch()
	if n := testing.AllocsPerRun(50, batch); n != 0 {
		t.Errorf("a batch with two captures running allocates %.1f times", n)
	}
	rx.Stop()
	tx.Stop()
}

// blockingPort is a Port whose Read blocks until Close.
type blockingPort struct{ closed chan struct{} }

func (p *blockingPort) Name() string                                        { return "blocking" }
func (p *blockingPort) Caps() port.Caps                                     { return port.Caps{} }
func (p *blockingPort) BatchSize() int                                      { return 8 }
func (p *blockingPort) Write(b [][]byte, _ []port.Meta, _ int) (int, error) { return len(b), nil }
func (p *blockingPort) Read([][]byte, []port.Meta, int) (int, error) {
	<-p.closed
	return 0, errors.New("closed")
}
func (p *blockingPort) Close() error {
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	return nil
}

func TestCaptureEndsWithPort(t *testing.T) {
	tbl := flowtable.New(flowtable.Config{})
	sw, err := New(Config{Table: tbl})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	if err := sw.AddPort(5, &blockingPort{closed: make(chan struct{})}); err != nil {
		t.Fatal(err)
	}
	c, err := sw.StartCapture(5, CaptureConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.RemovePort(5); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Next(ctx); !errors.Is(err, ErrCaptureStopped) {
		t.Errorf("Next after RemovePort: %v, want ErrCaptureStopped", err)
	}
}

// TestCaptureLimit: at most MaxCaptures captures run on a switch; stopping
// one makes room for another.
func TestCaptureLimit(t *testing.T) {
	sw, err := New(Config{Table: flowtable.New(flowtable.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	var caps []*Capture
	for no := uint32(3); no < 3+MaxCaptures+1; no++ {
		if err := sw.AddPort(no, &blockingPort{closed: make(chan struct{})}); err != nil {
			t.Fatal(err)
		}
		c, err := sw.StartCapture(no, CaptureConfig{Queue: 4})
		if no < 3+MaxCaptures {
			if err != nil {
				t.Fatalf("capture %d: %v", no, err)
			}
			caps = append(caps, c)
			continue
		}
		if !errors.Is(err, ErrTooManyCaptures) {
			t.Fatalf("capture beyond MaxCaptures: %v, want ErrTooManyCaptures", err)
		}
		caps[0].Stop()
		if c, err = sw.StartCapture(no, CaptureConfig{Queue: 4}); err != nil {
			t.Fatalf("after stopping one: %v", err)
		}
		c.Stop()
	}
	if got := sw.CaptureTotals().Active; got != MaxCaptures-1 {
		t.Errorf("%d captures active, want %d", got, MaxCaptures-1)
	}
}

func TestParseCaptureDir(t *testing.T) {
	for in, want := range map[string]CaptureDir{"in": CaptureRx, "rx": CaptureRx, "out": CaptureTx, "tx": CaptureTx, "both": CaptureBoth, "": CaptureBoth} {
		if d, err := ParseCaptureDir(in); err != nil || d != want || (in != "" && in != "rx" && in != "tx" && d.String() != in) {
			t.Errorf("ParseCaptureDir(%q) = %v, %v", in, d, err)
		}
	}
	if _, err := ParseCaptureDir("sideways"); err == nil {
		t.Error("sideways accepted")
	}
}

// BenchmarkProcessBatchCapture is BenchmarkProcessBatch with captures on
// the input port and the tunnel port, drained after each batch.
func BenchmarkProcessBatchCapture(b *testing.B) {
	w := captureWorker(b)
	rx, err := w.s.StartCapture(3, CaptureConfig{})
	if err != nil {
		b.Fatal(err)
	}
	tx, err := w.s.StartCapture(1, CaptureConfig{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	n := len(w.bufs)
	b.ReportAllocs()
	for b.Loop() {
		w.process(n)
		for _, c := range []*Capture{rx, tx} {
			for c.Pending() > 0 {
				f, _ := c.Next(ctx)
				c.Release(f)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/frame")
}
