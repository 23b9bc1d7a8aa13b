package vswitch

import (
	"testing"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/sdn"
)

// mcastFrames is how many frames the multicast worker processes per batch:
// a whole batch, each frame of which takes 3 copies from the worker's 8
// spare buffers (the worker writes out what it has queued when they run
// short).
const mcastFrames = 64

// multicastWorker returns a worker for local pod 0's port of a churnNode
// with 100 pods and nodes remote nodes, whose VNID (1, shared with pod 50)
// opted in to multicast, loaded with mcastFrames UDP frames to 239.1.2.3:
// each goes to every remote node (table 111) and to pod 50 (table 120).
// It also returns the pod port and the tunnel's sink.
func multicastWorker(tb testing.TB, nodes int) (w *worker, pods *discardPort, tunnel *tunnelSink) {
	tb.Helper()
	var ps []sdn.Pod
	for i := range 100 {
		ps = append(ps, churnPod(i))
	}
	var remotes []sdn.RemoteNode
	for j := range nodes {
		remotes = append(remotes, churnRemote(1+j))
	}
	rs, err := sdn.Program(churnNode, ps, remotes)
	if err != nil {
		tb.Fatal(err)
	}
	src, peer := churnPod(0), churnPod(50)
	mc, err := sdn.MulticastRules(churnNode, src.VNID, []uint32{src.Port, peer.Port})
	if err != nil {
		tb.Fatal(err)
	}
	tbl := flowtable.New(flowtable.Config{})
	if err := tbl.Add(append(rs, mc...)...); err != nil {
		tb.Fatal(err)
	}
	ct, err := conntrack.New(conntrack.Config{MaxEntries: 1024})
	if err != nil {
		tb.Fatal(err)
	}
	sw, err := New(Config{Table: tbl, Conntrack: ct})
	if err != nil {
		tb.Fatal(err)
	}
	pods = &discardPort{}
	tunnel = &tunnelSink{discardPort: discardPort{tunnel: true}, dsts: map[[4]byte]int{}}
	m := portMap{
		src.Port:      {no: src.Port, q: []Port{pods}},
		peer.Port:     {no: peer.Port, q: []Port{pods}},
		sdn.PortVXLAN: {no: sdn.PortVXLAN, q: []Port{tunnel}, caps: tunnel.Caps()},
	}
	sw.ports.Store(&m)
	w = sw.newWorker(m[src.Port], pods)
	for i := range mcastFrames {
		f := udpCT(src.IP.As4(), [4]byte{239, 1, 2, 3}, uint16(10000+i), 5000, "0123456789abcdef")
		copy(f[0:6], []byte{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03})
		mac := sdn.PodMAC(src.IP)
		copy(f[6:12], mac[:])
		w.meta[i] = port.Meta{Size: copy(w.bufs[i][Headroom:], f)}
	}
	return w, pods, tunnel
}

// tunnelSink is a tunnel port that counts the frames written to each
// tunnel endpoint.
type tunnelSink struct {
	discardPort
	dsts map[[4]byte]int
}

func (p *tunnelSink) Write(bufs [][]byte, meta []port.Meta, off int) (int, error) {
	for _, m := range meta[:len(bufs)] {
		p.dsts[m.Tunnel.Addr]++
	}
	return p.discardPort.Write(bufs, meta, off)
}

// TestMulticastPathAllocs: a frame of an opted-in VNID reaches every
// remote node and the other local pod of its VNID, and processing it
// allocates nothing.
func TestMulticastPathAllocs(t *testing.T) {
	w, pods, tunnel := multicastWorker(t, 3)
	w.process(mcastFrames)
	if pods.n != mcastFrames || tunnel.n != 3*mcastFrames {
		t.Fatalf("%d frames: %d to pods, %d into the tunnel; want %d and %d",
			mcastFrames, pods.n, tunnel.n, mcastFrames, 3*mcastFrames)
	}
	if n := testing.AllocsPerRun(100, func() { w.process(mcastFrames) }); n != 0 {
		t.Errorf("processing multicast allocates %.1f times", n)
	}
}

// TestMulticastManyNodes: head-end replication to 40 remote nodes, far
// more copies per batch than a worker has spare buffers: every frame of a
// batch reaches every node once, and the local pod, none dropped.
func TestMulticastManyNodes(t *testing.T) {
	const nodes = 40
	w, pods, tunnel := multicastWorker(t, nodes)
	w.process(mcastFrames)
	if pods.n != mcastFrames || tunnel.n != nodes*mcastFrames {
		t.Fatalf("%d frames: %d to pods, %d into the tunnel; want %d and %d",
			mcastFrames, pods.n, tunnel.n, mcastFrames, nodes*mcastFrames)
	}
	for j := range nodes {
		ip := churnRemote(1 + j).IP.As4()
		if n := tunnel.dsts[ip]; n != mcastFrames {
			t.Errorf("node %v got %d frames, want %d", ip, n, mcastFrames)
		}
	}
	if d := w.s.drops[DropNoBuffer].n.Load() + w.s.drops[DropTooManyOutputs].n.Load(); d != 0 {
		t.Errorf("%d copies dropped", d)
	}
}

// BenchmarkMulticast: the per-frame cost of a multicast frame of an
// opted-in VNID through the whole rule program of a multitenant node, out
// to 3 remote nodes (head-end replication: 3 tunnel copies) and one local
// pod; ns/frame counts the frame, not its copies.
func BenchmarkMulticast(b *testing.B) {
	w, _, _ := multicastWorker(b, 3)
	b.ReportAllocs()
	for b.Loop() {
		w.process(mcastFrames)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*mcastFrames), "ns/frame")
}
