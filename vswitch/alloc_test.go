package vswitch

import (
	"encoding/binary"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// discardPort accepts writes and never delivers a frame. As a tunnel it is
// a Framer whose outer header records what it was given (testFramer).
type discardPort struct {
	n      int
	tunnel bool
}

func (p *discardPort) Name() string                                 { return "discard" }
func (p *discardPort) Caps() port.Caps                              { return port.Caps{Tunnel: p.tunnel} }
func (p *discardPort) BatchSize() int                               { return 64 }
func (p *discardPort) Close() error                                 { return nil }
func (p *discardPort) Read([][]byte, []port.Meta, int) (int, error) { select {} }
func (p *discardPort) Write(bufs [][]byte, _ []port.Meta, _ int) (int, error) {
	p.n += len(bufs)
	return len(bufs), nil
}

// testFramer's outer header: the direction, the tunnel endpoint, the flow
// hash and the frame's size, so that a test reads back what the capture
// asked the port for; zeros pad it to 32 bytes, which with a test frame
// exceed MinSnaplen.
type testFramer struct{}

const testWireLen = 32

func (testFramer) WireHeaderLen() int { return testWireLen }
func (testFramer) PutWireHeader(b []byte, m *port.Meta, received bool) {
	b[0] = 't'
	if received {
		b[0] = 'r'
	}
	copy(b[1:5], m.Tunnel.Addr[:])
	binary.BigEndian.PutUint32(b[5:], m.Tunnel.VNI)
	binary.BigEndian.PutUint32(b[9:], m.Hash)
	binary.BigEndian.PutUint32(b[13:], uint32(m.Size))
	clear(b[17:testWireLen])
}

// framingPort is a discardPort tunnel that is a Framer.
type framingPort struct {
	*discardPort
	testFramer
}

// benchWorker builds a switch whose port 3 sends to port 4 and to the
// tunnel, and a worker for port 3 with a batch of 64 frames loaded.
func benchWorker(tb testing.TB) (*worker, *discardPort) {
	return batchWorker(tb, "set_field:192.0.2.2->tun_dst, output:1")
}

// batchWorker builds a switch whose port 3 sends 10.0.0.4 to port 4 and
// 10.0.0.9 into the tunnel (port 1) with tunnelActions, and a worker for
// port 3 with a batch of 64 frames loaded, alternating between the two.
// The destination ports run no workers: the test drives port 3's by hand.
func batchWorker(tb testing.TB, tunnelActions string) (*worker, *discardPort) {
	tb.Helper()
	tbl := flowtable.New(flowtable.Config{})
	rs, err := flowtable.ParseRules(`
table=0, priority=100, in_port=3, ip, nw_dst=10.0.0.4, actions=output:4
table=0, priority=100, in_port=3, ip, nw_dst=10.0.0.9, actions=` + tunnelActions)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tbl.Add(rs...); err != nil {
		tb.Fatal(err)
	}
	sw, err := New(Config{Table: tbl})
	if err != nil {
		tb.Fatal(err)
	}
	out := &discardPort{}
	vx := framingPort{&discardPort{tunnel: true}, testFramer{}}
	m := portMap{
		3: {no: 3, q: []Port{out}},
		4: {no: 4, q: []Port{out}},
		1: {no: 1, q: []Port{vx}, caps: vx.Caps(), framer: vx},
	}
	sw.ports.Store(&m)
	w := sw.newWorker(m[3], m[3].q[0])
	for i := range w.bufs {
		dst := byte(4)
		if i%2 == 1 {
			dst = 9
		}
		w.meta[i] = port.Meta{Size: copy(w.bufs[i][Headroom:], udpFrame(3, dst))}
	}
	return w, out
}

func TestProcessAllocs(t *testing.T) {
	w, out := benchWorker(t)
	w.process(len(w.bufs)) // warm the cache and the output queues
	if n := testing.AllocsPerRun(100, func() { w.process(len(w.bufs)) }); n != 0 {
		t.Errorf("processing a batch allocates %.1f times", n)
	}
	if out.n == 0 {
		t.Fatal("nothing was written")
	}
}

// TestProcessAllocsMultiQueue: spreading frames over the queues of a
// multi-queue port allocates nothing either, and uses every queue.
func TestProcessAllocsMultiQueue(t *testing.T) {
	w, _ := benchWorker(t)
	q0, q1 := &discardPort{}, &discardPort{}
	(*w.s.ports.Load())[4] = &portEntry{no: 4, q: []Port{q0, q1}}
	// Vary the source port so that the frames make several flows.
	for i := range w.bufs {
		binary.BigEndian.PutUint16(w.bufs[i][Headroom+packet.EthernetLen+20:], uint16(1000+i))
	}
	w.process(len(w.bufs))
	if n := testing.AllocsPerRun(100, func() { w.process(len(w.bufs)) }); n != 0 {
		t.Errorf("processing a batch allocates %.1f times", n)
	}
	if q0.n == 0 || q1.n == 0 {
		t.Fatalf("frames per queue: %d and %d; want both used", q0.n, q1.n)
	}
}

func BenchmarkProcessBatch(b *testing.B) {
	w, _ := benchWorker(b)
	benchBatch(b, w)
}

// benchBatch measures w's processing of its loaded batch, over and over,
// in ns per frame.
func benchBatch(b *testing.B, w *worker) {
	n := len(w.bufs)
	b.ReportAllocs()
	b.SetBytes(int64(n * w.meta[0].Size))
	for b.Loop() {
		w.process(n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/frame")
}

// replayPort is a Port whose Read hands over the same frames every time,
// at once: a worker's whole round through the Port interface, with no
// channel or system call in it.
type replayPort struct {
	discardPort
	frames [][]byte
}

func (p *replayPort) Read(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	n := min(len(bufs), len(p.frames))
	for i := range n {
		meta[i] = port.Meta{Size: copy(bufs[i][offset:], p.frames[i])}
	}
	return n, nil
}

// TestPortRoundAllocs: a worker's round — Read through the Port interface,
// the pipeline, the flow hash, Write to a plain port and to the tunnel with
// their port.Meta — allocates nothing.
func TestPortRoundAllocs(t *testing.T) {
	w, out := benchWorker(t)
	in := &replayPort{}
	for i := range 64 {
		in.frames = append(in.frames, udpFrame(3, []byte{4, 9}[i%2]))
	}
	w.q = in
	round := func() {
		n, err := w.q.Read(w.bufs, w.meta, Headroom)
		if err != nil {
			t.Fatal(err)
		}
		w.process(n)
	}
	round()
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Errorf("a worker's round allocates %.1f times", n)
	}
	if out.n == 0 {
		t.Fatal("nothing was written")
	}
}
