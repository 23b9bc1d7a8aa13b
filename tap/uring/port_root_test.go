package uring_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/bench/iofloor"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/tap/uring"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// A Port is what the switch's idle trimming looks for: it can be woken and
// says whether it holds rings.
var (
	_ vswitch.Port   = (*uring.Port)(nil)
	_ vswitch.Waker  = (*uring.Port)(nil)
	_ vswitch.Holder = (*uring.Port)(nil)
)

// portPair makes TAPs a → b (mirred), TSO on both, as Ports that hold
// their rings from the start (PortConfig.Always): what most tests look at.
func portPair(tb testing.TB) (*iofloor.Lab, *uring.Port, *uring.Port) {
	return portPairConfig(tb, uring.PortConfig{Always: true})
}

func portPairConfig(tb testing.TB, cfg uring.PortConfig) (*iofloor.Lab, *uring.Port, *uring.Port) {
	tb.Helper()
	if err := uring.Supported(); err != nil {
		tb.Skip(err)
	}
	l := iofloor.NewLab(tb)
	a := l.TAP("gvspa", tap.OffloadsTSO)
	b := l.TAP("gvspb", tap.OffloadsTSO)
	l.Mirror("gvspa", "gvspb")
	pa, err := uring.NewPortConfig(a, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	pb, err := uring.NewPortConfig(b, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pa.Close(); pb.Close() })
	return l, pa, pb
}

// buffers returns n receive buffers of size bytes and a set of their
// addresses.
func buffers(n, size int) ([][]byte, map[*byte]bool) {
	bufs := make([][]byte, n)
	set := map[*byte]bool{}
	for i := range bufs {
		bufs[i] = make([]byte, size)
		set[unsafe.SliceData(bufs[i])] = true
	}
	return bufs, set
}

func metas(out [][]byte, gso []packet.GSO) []port.Meta {
	m := make([]port.Meta, len(out))
	for i := range out {
		m[i] = port.Meta{Size: len(out[i]) - iofloor.Headroom}
		if gso != nil {
			m[i].GSO = gso[i]
		}
	}
	return m
}

// TestPortLoop writes batches of every size through one Port's transmit
// ring and reads them back through another's multishot read, with fewer
// receive buffers than a batch has frames: bytes, order and TSO metadata
// survive, Read returns frames by reordering the caller's own buffers
// (never another buffer), and the device's counters count both sides.
func TestPortLoop(t *testing.T) {
	_, pa, pb := portPair(t)
	bufs, set := buffers(16, iofloor.Headroom+packet.MaxSuperFrame+1)
	meta := make([]port.Meta, len(bufs))
	total := 0
	for _, size := range iofloor.Sizes {
		out, gso := iofloor.Buffers(24, size)
		for round := range 4 {
			if n, err := pa.Write(out, metas(out, gso), iofloor.Headroom); n != len(out) || err != nil {
				t.Fatalf("%d B: wrote %d: %v", size, n, err)
			}
			for got := 0; got < len(out); {
				n, err := pb.Read(bufs, meta, iofloor.Headroom)
				if err != nil {
					t.Fatal(err)
				}
				for i := range bufs {
					if !set[unsafe.SliceData(bufs[i])] || len(bufs[i]) != iofloor.Headroom+packet.MaxSuperFrame+1 {
						t.Fatalf("slot %d holds a buffer that is not the caller's", i)
					}
				}
				for i := range n {
					f := bufs[i][iofloor.Headroom : iofloor.Headroom+meta[i].Size]
					if !bytes.Equal(f, out[got][iofloor.Headroom:]) {
						t.Fatalf("%d B round %d: frame %d differs (got %d B, seq %d)", size, round, got, len(f), iofloor.Seq(f))
					}
					if meta[i].GSO.IsGSO() != gso[got].IsGSO() || meta[i].GSO.Size != gso[got].Size {
						t.Fatalf("%d B: GSO %+v, sent %+v", size, meta[i].GSO, gso[got])
					}
					got++
				}
			}
			total += len(out)
		}
	}
	if distinct := len(set); distinct != 16 {
		t.Fatalf("%d buffers", distinct)
	}
	if _, tx := pa.Fallback(); tx {
		t.Error("the transmit ring fell back to write(2)")
	}
	if rx, _ := pb.Fallback(); rx {
		t.Error("the receive ring fell back to read(2)")
	}
	sa, sb := pa.Stats(), pb.Stats()
	if sa.TxPackets != uint64(total) || sb.RxPackets != uint64(total) || sa.TxErrors != 0 || sb.RxDropped() != 0 {
		t.Errorf("sent %d: tx %+v, rx %+v", total, sa, sb)
	}
}

// TestPortRefusals: a frame larger than the receive buffers is dropped and
// counted (DropTruncated), not returned cut; other buffers than the first
// call's are refused; a write of a buffer shorter than its frame fails.
func TestPortRefusals(t *testing.T) {
	_, pa, pb := portPair(t)
	bufs, _ := buffers(8, iofloor.Headroom+1000)
	meta := make([]port.Meta, len(bufs))
	big, _ := iofloor.Buffers(1, 1500)
	small, _ := iofloor.Buffers(1, 64)
	if n, err := pa.Write(append(big, small...), metas(append(big, small...), nil), iofloor.Headroom); n != 2 || err != nil {
		t.Fatalf("wrote %d: %v", n, err)
	}
	n, err := pb.Read(bufs, meta, iofloor.Headroom)
	if err != nil || n != 1 || meta[0].Size != 64-4 && meta[0].Size != 64 {
		t.Fatalf("read %d (%+v): %v", n, meta[0], err)
	}
	if !bytes.Equal(bufs[0][iofloor.Headroom:iofloor.Headroom+meta[0].Size], small[0][iofloor.Headroom:]) {
		t.Fatal("the small frame differs")
	}
	if d := pb.Stats().RxDrops[tap.DropTruncated]; d != 1 {
		t.Errorf("truncated drops: %d, want 1", d)
	}
	other, _ := buffers(8, iofloor.Headroom+1000)
	if _, err := pb.Read(other, meta, iofloor.Headroom); !errors.Is(err, uring.ErrBuffers) {
		t.Errorf("read with other buffers: %v", err)
	}
	if _, err := pb.Read(bufs, meta, iofloor.Headroom+2); !errors.Is(err, uring.ErrBuffers) {
		t.Errorf("read with another offset: %v", err)
	}
	m := metas(small, nil)
	m[0].Size = 100
	if n, err := pa.Write(small, m, iofloor.Headroom); n != 0 || !errors.Is(err, tap.ErrHeadroom) {
		t.Errorf("write of a 64-byte buffer as a 100-byte frame: %d, %v", n, err)
	}
}

// TestPortWakeClose: Wake ends a waiting Read with port.ErrWoken and the
// port reads on; Close ends a waiting Read with tap.ErrClosed, and once
// that Read has returned the TAP is gone (the ring held no reference to
// it past its reader); writes after Close fail.
func TestPortWakeClose(t *testing.T) {
	l, pa, pb := portPair(t)
	bufs, _ := buffers(8, iofloor.Headroom+2048)
	meta := make([]port.Meta, len(bufs))
	res := make(chan error, 1)
	read := func() {
		_, err := pb.Read(bufs, meta, iofloor.Headroom)
		res <- err
	}
	// Reads come from one goroutine, which the first Read locks to its
	// thread: run every Read on the same one.
	reqs := make(chan struct{})
	go func() {
		for range reqs {
			read()
		}
	}()
	defer close(reqs)
	blocked := uring.Blocked(pb)
	askBlocked(t, blocked, func() { reqs <- struct{}{} })
	pb.Wake()
	if err := <-res; !errors.Is(err, port.ErrWoken) {
		t.Fatalf("after Wake: %v", err)
	}
	small, _ := iofloor.Buffers(1, 64)
	if n, err := pa.Write(small, metas(small, nil), iofloor.Headroom); n != 1 || err != nil {
		t.Fatalf("wrote %d: %v", n, err)
	}
	reqs <- struct{}{}
	if err := <-res; err != nil {
		t.Fatalf("read after a wake-up: %v", err)
	}
	askBlocked(t, blocked, func() { reqs <- struct{}{} })
	if err := pb.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, tap.ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the Read")
	}
	if err := l.Do(func() error { _, err := net.InterfaceByName("gvspb"); return err }); err == nil {
		t.Error("the TAP is still there after Close and the reader's return")
	}
	if err := pb.Close(); !errors.Is(err, tap.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := pb.Write(small, metas(small, nil), iofloor.Headroom); !errors.Is(err, tap.ErrClosed) {
		t.Errorf("write after Close: %v", err)
	}
}

// TestPortAllocs: a batch written and read back allocates nothing.
func TestPortAllocs(t *testing.T) {
	_, pa, pb := portPair(t)
	bufs, _ := buffers(64, iofloor.Headroom+2048)
	meta := make([]port.Meta, len(bufs))
	out, _ := iofloor.Buffers(32, 64)
	om := metas(out, nil)
	loop := func() {
		if n, err := pa.Write(out, om, iofloor.Headroom); n != len(out) || err != nil {
			t.Fatalf("wrote %d: %v", n, err)
		}
		for got := 0; got < len(out); {
			n, err := pb.Read(bufs, meta, iofloor.Headroom)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	loop()
	if a := testing.AllocsPerRun(100, loop); a != 0 {
		t.Errorf("%v allocations per batch", a)
	}
}

// TestPortShortMeta: a Read with fewer Meta than buffers returns at most
// that many frames and keeps the rest queued (their buffers neither in the
// kernel's ring nor returned) for the next Reads, in order, the caller's
// buffers staying a permutation of themselves.
func TestPortShortMeta(t *testing.T) {
	_, pa, pb := portPair(t)
	bufs, set := buffers(16, iofloor.Headroom+2048)
	meta := make([]port.Meta, 5)
	out, _ := iofloor.Buffers(40, 64)
	for round := range 3 {
		if n, err := pa.Write(out, metas(out, nil), iofloor.Headroom); n != len(out) || err != nil {
			t.Fatalf("wrote %d: %v", n, err)
		}
		for got := 0; got < len(out); {
			n, err := pb.Read(bufs, meta, iofloor.Headroom)
			if err != nil {
				t.Fatal(err)
			}
			if n > len(meta) {
				t.Fatalf("%d frames for %d Meta", n, len(meta))
			}
			seen := map[*byte]bool{}
			for _, b := range bufs {
				if p := unsafe.SliceData(b); !set[p] || seen[p] {
					t.Fatal("bufs is no longer a permutation of the caller's buffers")
				} else {
					seen[p] = true
				}
			}
			for i := range n {
				if !bytes.Equal(bufs[i][iofloor.Headroom:iofloor.Headroom+meta[i].Size], out[got][iofloor.Headroom:]) {
					t.Fatalf("round %d: frame %d differs", round, got)
				}
				got++
			}
		}
	}
}

// TestPortQuietFewBuffers: frames that come one at a time land in a few
// buffers (the ring holds 8 while the port is quiet, one more is lent), not in every one of
// the caller's 64 in turn, so a quiet pod dirties a few pages; a burst
// grows the ring.
func TestPortQuietFewBuffers(t *testing.T) {
	_, pa, pb := portPair(t)
	bufs, _ := buffers(64, iofloor.Headroom+2048)
	meta := make([]port.Meta, len(bufs))
	one, _ := iofloor.Buffers(1, 64)
	used := map[*byte]bool{}
	for range 100 {
		if n, err := pa.Write(one, metas(one, nil), iofloor.Headroom); n != 1 || err != nil {
			t.Fatalf("wrote %d: %v", n, err)
		}
		n, err := pb.Read(bufs, meta, iofloor.Headroom)
		if err != nil || n != 1 {
			t.Fatalf("read %d: %v", n, err)
		}
		used[unsafe.SliceData(bufs[0])] = true
	}
	if len(used) > 9 { // 8 in the ring, 1 lent
		t.Errorf("100 single frames landed in %d buffers, want at most 9", len(used))
	}
	burst, _ := iofloor.Buffers(60, 64)
	if n, err := pa.Write(burst, metas(burst, nil), iofloor.Headroom); n != len(burst) || err != nil {
		t.Fatalf("wrote %d: %v", n, err)
	}
	reads := 0
	for got := 0; got < len(burst); reads++ {
		n, err := pb.Read(bufs, meta, iofloor.Headroom)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if reads > 6 {
		t.Errorf("a burst of 60 took %d reads: the ring did not grow", reads)
	}
}

// readResult is one Read of a movingReader: its frames' sequence numbers,
// its error and the thread it ran on.
type readResult struct {
	n    int
	seqs []uint64
	err  error
	tid  int
}

// movingReader runs p's Reads on one goroutine, as the switch's worker
// does, going on from a new goroutine after port.ErrMoveReader. ask starts
// a Read; recv waits for its result, failing in 5 s rather than hanging.
func movingReader(t *testing.T, p *uring.Port, bufs [][]byte, meta []port.Meta) (ask func(), recv func() readResult) {
	reqs, res := make(chan struct{}), make(chan readResult, 1)
	var loop func()
	loop = func() {
		for range reqs {
			n, err := p.Read(bufs, meta, iofloor.Headroom)
			r := readResult{n: n, err: err, tid: unix.Gettid()}
			for i := range n {
				r.seqs = append(r.seqs, iofloor.Seq(bufs[i][iofloor.Headroom:iofloor.Headroom+meta[i].Size]))
			}
			res <- r
			if errors.Is(err, port.ErrMoveReader) {
				go loop()
				return
			}
		}
	}
	go loop()
	t.Cleanup(func() { close(reqs) })
	ask = func() { reqs <- struct{}{} }
	recv = func() readResult {
		t.Helper()
		select {
		case r := <-res:
			return r
		case <-time.After(5 * time.Second):
			t.Fatal("a Read did not return within 5 s")
			return readResult{}
		}
	}
	return ask, recv
}

// TestPortOnDemand: a port with rings on demand (NewPort's default) reads
// and writes single frames through the device and holds no ring; a batch
// written makes the transmit ring, promoteFrames frames read make the
// receive ring (and lock the reader's thread); woken while idle, the
// reader gives the receive ring up with port.ErrMoveReader, its thread
// ending with its goroutine, and keeps the transmit ring only if it was
// used since the last wake-up; frames flow on from a new goroutine.
func TestPortOnDemand(t *testing.T) {
	_, pa, pb := portPairConfig(t, uring.PortConfig{})
	bufs, _ := buffers(64, iofloor.Headroom+2048)
	meta := make([]port.Meta, len(bufs))
	ask, recv := movingReader(t, pb, bufs, meta)
	blocked := uring.Blocked(pb)
	liveRx0, liveTx0 := uring.LiveRings() // other tests' leftovers
	read := func(want int) readResult {
		t.Helper()
		got := 0
		var r readResult
		for got < want {
			ask()
			if r = recv(); r.err != nil {
				t.Fatalf("read after %d of %d frames: %v", got, want, r.err)
			}
			got += r.n
		}
		return r
	}
	rings := func(what string, rx, tx bool) {
		t.Helper()
		if r, _ := pb.Rings(); r != rx {
			t.Errorf("%s: receive ring %v, want %v", what, r, rx)
		}
		// The device is in Go's netpoller exactly while it has no ring.
		if polled := pb.Device.Polled(); polled == rx {
			t.Errorf("%s: receive ring %v and the device in the netpoller %v", what, rx, polled)
		}
		if _, w := pa.Rings(); w != tx {
			t.Errorf("%s: sender's transmit ring %v, want %v", what, w, tx)
		}
		b2i := func(b bool) int {
			if b {
				return 1
			}
			return 0
		}
		if r, w := uring.LiveRings(); r-liveRx0 != b2i(rx) || w-liveTx0 != b2i(tx) {
			t.Errorf("%s: LiveRings counts %d receive and %d transmit rings, want %d and %d", what, r-liveRx0, w-liveTx0, b2i(rx), b2i(tx))
		}
	}
	one, _ := iofloor.Buffers(1, 64)
	for range 5 {
		if n, err := pa.Write(one, metas(one, nil), iofloor.Headroom); n != 1 || err != nil {
			t.Fatalf("wrote %d: %v", n, err)
		}
		read(1)
	}
	rings("single frames", false, false)
	if pb.Holds() {
		t.Error("a port without rings says it holds some")
	}
	burst, _ := iofloor.Buffers(40, 64)
	if n, err := pa.Write(burst, metas(burst, nil), iofloor.Headroom); n != len(burst) || err != nil {
		t.Fatalf("wrote %d: %v", n, err)
	}
	read(len(burst))
	rings("a batch written, 45 frames read", false, true)
	if n, err := pa.Write(burst, metas(burst, nil), iofloor.Headroom); n != len(burst) || err != nil {
		t.Fatalf("wrote %d: %v", n, err)
	}
	ringTid := read(len(burst)).tid
	rings("busy", true, true)
	if !pb.Holds() {
		t.Error("a port with its receive ring says it holds none")
	}

	// Woken idle: the receive ring and the thread go.
	askBlocked(t, blocked, ask)
	pb.Wake()
	if r := recv(); !errors.Is(r.err, port.ErrMoveReader) || !errors.Is(r.err, port.ErrWoken) || r.n != 0 {
		t.Fatalf("woken with the ring up: %d, %v", r.n, r.err)
	}
	if rx, _ := pb.Rings(); rx || pb.Holds() || !pb.Device.Polled() {
		t.Errorf("after the move: receive ring %v, holds %v, in the netpoller %v", rx, pb.Holds(), pb.Device.Polled())
	}
	// A goroutine that ends locked to its thread takes the thread with it,
	// except the process's main thread, which Go parks for good instead:
	// a reader that locked itself there cannot show its thread ending.
	if ringTid == os.Getpid() {
		t.Logf("the ring's reader ran on the main thread %d, which Go parks instead of ending; not checked", ringTid)
	} else {
		task := fmt.Sprintf("/proc/self/task/%d", ringTid)
		testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("the ring's thread %d to end", ringTid), func() (bool, error) {
			_, err := os.Stat(task)
			return errors.Is(err, os.ErrNotExist), nil
		})
	}
	// The sender's transmit ring was used since its last wake-up (never):
	// kept the first time, given up the second.
	pa.Wake() // no reader on pa: its next Read reports it
	if _, err := pa.Read(bufs[:1], meta[:1], iofloor.Headroom); !errors.Is(err, port.ErrWoken) || errors.Is(err, port.ErrMoveReader) {
		t.Fatalf("pa woken without a receive ring: %v", err)
	}
	rings("the sender woken once", false, true)
	pa.Wake()
	if _, err := pa.Read(bufs[:1], meta[:1], iofloor.Headroom); !errors.Is(err, port.ErrWoken) {
		t.Fatalf("pa woken: %v", err)
	}
	rings("the sender woken twice", false, false)

	// Frames flow on, read by the new goroutine.
	if n, err := pa.Write(one, metas(one, nil), iofloor.Headroom); n != 1 || err != nil {
		t.Fatalf("wrote %d: %v", n, err)
	}
	if r := read(1); r.tid == ringTid {
		t.Errorf("read on thread %d, the one that should have ended", r.tid)
	}
	if !bytes.Equal(bufs[0][iofloor.Headroom:iofloor.Headroom+meta[0].Size], one[0][iofloor.Headroom:]) {
		t.Error("the frame after the move differs")
	}

	// Busy again, twice over: a new receive ring each time, and every
	// frame intact and in order through it.
	for cycle := range 2 {
		for round := range 3 {
			if n, err := pa.Write(burst, metas(burst, nil), iofloor.Headroom); n != len(burst) || err != nil {
				t.Fatalf("cycle %d: wrote %d: %v", cycle, n, err)
			}
			for got := 0; got < len(burst); {
				ask()
				r := recv()
				if r.err != nil {
					t.Fatalf("cycle %d round %d: read after %d frames: %v", cycle, round, got, r.err)
				}
				for i := range r.n {
					if !bytes.Equal(bufs[i][iofloor.Headroom:iofloor.Headroom+meta[i].Size], burst[got][iofloor.Headroom:]) {
						t.Fatalf("cycle %d round %d: frame %d differs", cycle, round, got)
					}
					got++
				}
			}
		}
		rings(fmt.Sprintf("busy again (%d)", cycle), true, true)
		askBlocked(t, blocked, ask)
		pb.Wake()
		if r := recv(); !errors.Is(r.err, port.ErrMoveReader) {
			t.Fatalf("cycle %d: woken with the ring up: %v", cycle, r.err)
		}
	}

	// Closed while busy: the transmit ring goes with Close, the receive
	// ring when the reader's Read returns.
	for range 2 {
		if n, err := pa.Write(burst, metas(burst, nil), iofloor.Headroom); n != len(burst) || err != nil {
			t.Fatalf("wrote %d: %v", n, err)
		}
		read(len(burst))
	}
	rings("busy before Close", true, true)
	askBlocked(t, blocked, ask)
	pa.Close()
	pb.Close()
	if r := recv(); !errors.Is(r.err, tap.ErrClosed) {
		t.Fatalf("read when closed: %d, %v", r.n, r.err)
	}
	if r, w := uring.LiveRings(); r != liveRx0 || w != liveTx0 {
		t.Errorf("closed: LiveRings counts %d receive and %d transmit rings, want %d and %d (as before the test)", r, w, liveRx0, liveTx0)
	}
}

// TestPortWakesLoseNothing: a stream of numbered frames read while the
// reader is woken every few milliseconds (each wake-up with the receive
// ring up gives it up, port.ErrMoveReader, and the stream makes it again)
// arrives whole and in order: frames the ring had taken when it was given
// up are returned, not dropped.
func TestPortWakesLoseNothing(t *testing.T) {
	_, pa, pb := portPairConfig(t, uring.PortConfig{})
	const batches, per = 1500, 4
	bufs, _ := buffers(64, iofloor.Headroom+2048)
	meta := make([]port.Meta, len(bufs))
	var mu sync.Mutex
	var seqs []uint64
	moves := 0
	var readErr error
	var reader func()
	reader = func() {
		for {
			n, err := pb.Read(bufs, meta, iofloor.Headroom)
			mu.Lock()
			for i := range n {
				seqs = append(seqs, iofloor.Seq(bufs[i][iofloor.Headroom:iofloor.Headroom+meta[i].Size]))
			}
			if errors.Is(err, port.ErrMoveReader) {
				moves++
			}
			mu.Unlock()
			switch {
			case errors.Is(err, port.ErrMoveReader):
				go reader()
				return
			case errors.Is(err, port.ErrWoken):
			case err != nil:
				mu.Lock()
				readErr = err
				mu.Unlock()
				return // closed, or a failure the test reports
			}
		}
	}
	go reader()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(3 * time.Millisecond):
				pb.Wake()
			}
		}
	}()
	out := make([][]byte, per)
	for i := range out {
		out[i] = make([]byte, iofloor.Headroom+64+1)
	}
	om := metas(out, nil)
	for b := range batches {
		for i := range out {
			iofloor.Frame(out[i][iofloor.Headroom:], 64, uint64(b*per+i))
			om[i].Size = 64
		}
		if n, err := pa.Write(out, om, iofloor.Headroom); n != per || err != nil {
			t.Fatalf("wrote %d: %v", n, err)
		}
		time.Sleep(300 * time.Microsecond) // pacing: batches spaced so that the reader goes idle between them
	}
	close(done)
	want := batches * per
	testutil.Eventually(5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seqs) >= want
	})
	mu.Lock()
	defer mu.Unlock()
	if moves < 5 {
		t.Errorf("the reader moved %d times: the test did not exercise giving the ring up", moves)
	}
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("frame %d of %d has sequence number %d (moves %d, drops %v)", i, len(seqs), s, moves, pb.Stats().RxDrops)
		}
	}
	if len(seqs) != want {
		t.Fatalf("%d of %d frames arrived (moves %d, read error %v)", len(seqs), want, moves, readErr)
	}
	t.Logf("%d frames, the reader moved %d times", want, moves)
}

// TestPortFramesDuringGiveUp: frames that reach the TAP while a woken
// idle reader is ending its read are returned or read later, never lost;
// when the ring took them, the port keeps it and still sees Close.
func TestPortFramesDuringGiveUp(t *testing.T) {
	_, pa, pb := portPairConfig(t, uring.PortConfig{})
	bufs, _ := buffers(64, iofloor.Headroom+2048)
	meta := make([]port.Meta, len(bufs))
	burst, _ := iofloor.Buffers(40, 64)
	ask, recv := movingReader(t, pb, bufs, meta)
	blocked := uring.Blocked(pb)
	for range 2 { // busy: the receive ring is made
		if n, err := pa.Write(burst, metas(burst, nil), iofloor.Headroom); n != len(burst) || err != nil {
			t.Fatalf("wrote %d: %v", n, err)
		}
		for got := 0; got < len(burst); {
			ask()
			r := recv()
			if r.err != nil {
				t.Fatal(r.err)
			}
			got += len(r.seqs)
		}
	}
	if rx, _ := pb.Rings(); !rx {
		t.Fatal("no receive ring after two bursts")
	}
	three := burst[:3]
	uring.SetHookBeforeCancel(func() {
		if n, err := pa.Write(three, metas(three, nil), iofloor.Headroom); n != 3 || err != nil {
			t.Errorf("wrote %d: %v", n, err)
		}
		// The frames reach pb's TAP before the cancel the hook precedes:
		// its queue is readable. (With DEFER_TASKRUN the ring reads them
		// only when this thread enters io_uring, in the cancel.)
		fds := []unix.PollFd{{Fd: int32(pb.Device.Fd()), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 5000)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if n != 1 || err != nil {
				t.Errorf("the frames did not reach the TAP within 5 s: %v", err)
			}
			break
		}
	})
	t.Cleanup(func() { uring.SetHookBeforeCancel(nil) })
	askBlocked(t, blocked, ask)
	pb.Wake()
	r := recv()
	uring.SetHookBeforeCancel(nil)
	got := r.seqs
	kept := r.err == nil
	switch {
	case kept:
		t.Logf("the ring returned %d frames written while it was ending its read", len(r.seqs))
		if rx, _ := pb.Rings(); !rx {
			t.Error("frames returned but the ring is gone")
		}
	case errors.Is(r.err, port.ErrMoveReader):
		t.Log("the frames stayed in the TAP; read through the device")
	default:
		t.Fatalf("woken: %v", r.err)
	}
	for len(got) < 3 {
		ask()
		if r = recv(); r.err != nil {
			t.Fatal(r.err)
		}
		got = append(got, r.seqs...)
	}
	if fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("frames %v, want [0 1 2]", got)
	}
	if kept { // the kept ring still sees a wake-up
		askBlocked(t, blocked, ask)
		pb.Wake()
		if r = recv(); !errors.Is(r.err, port.ErrMoveReader) {
			t.Fatalf("the kept ring's next wake-up: %v", r.err)
		}
	}
}

// TestPortBudget: a receive ring grows only within its budget (past its
// floor of 8 buffers) and loses no frame for it; a ring that shrinks
// gives its spare buffers' bytes back, a woken idle reader too, and a
// closed port all of them.
func TestPortBudget(t *testing.T) {
	const size = iofloor.Headroom + packet.MaxSuperFrame + 1
	budget, err := port.NewBudget(12 * size)
	if err != nil {
		t.Fatal(err)
	}
	_, pa, pb := portPairConfig(t, uring.PortConfig{Always: true, Budget: budget})
	bufs, _ := buffers(64, size)
	meta := make([]port.Meta, len(bufs))
	burst, _ := iofloor.Buffers(60, 64)
	filled := map[*byte]bool{}
	for round := range 5 {
		if n, err := pa.Write(burst, metas(burst, nil), iofloor.Headroom); n != len(burst) || err != nil {
			t.Fatalf("wrote %d: %v", n, err)
		}
		for got := 0; got < len(burst); {
			n, err := pb.Read(bufs, meta, iofloor.Headroom)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if s := iofloor.Seq(bufs[i][iofloor.Headroom : iofloor.Headroom+meta[i].Size]); s != uint64(got) {
					t.Fatalf("round %d: frame %d has sequence number %d", round, got, s)
				}
				filled[unsafe.SliceData(bufs[i])] = true
				got++
			}
		}
		if in := budget.InUse(); in > 12*size {
			t.Fatalf("round %d: %d bytes in use, more than the budget of %d", round, in, 12*size)
		}
	}
	if len(filled) > 12 {
		t.Errorf("frames landed in %d buffers, the budget allows 12", len(filled))
	}
	if budget.Denied() == 0 {
		t.Error("bursts of 60 frames never asked for more than 12 buffers")
	}
	if st := pb.Stats(); st.RxPackets != 5*60 || st.RxDropped() != 0 {
		t.Errorf("received %d of 300, %d dropped", st.RxPackets, st.RxDropped())
	}

	// Without pressure: the ring grows to 64, then shrinks while single
	// frames come, its spare buffers going back at each shrink.
	big, err := port.NewBudget(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	_, pc, pd := portPairConfig(t, uring.PortConfig{Always: true, Budget: big})
	one, _ := iofloor.Buffers(1, 64)
	dbufs, _ := buffers(64, size)
	xfer := func(out [][]byte) {
		t.Helper()
		if n, err := pc.Write(out, metas(out, nil), iofloor.Headroom); n != len(out) || err != nil {
			t.Fatalf("wrote %d: %v", n, err)
		}
		for got := 0; got < len(out); {
			n, err := pd.Read(dbufs, meta, iofloor.Headroom)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	for range 3 {
		xfer(burst)
	}
	grown := big.InUse()
	if grown < 32*size {
		t.Fatalf("after bursts of 60 the ring holds %d buffers", grown/size)
	}
	// Nobody waits for the budget: the quiet ring keeps its pages
	// (giving them back would only cost page faults at the next burst).
	for range 4 * 256 {
		xfer(one)
	}
	if in := big.InUse(); in != grown {
		t.Errorf("after 1 024 single frames and no refusal %d buffers are counted, %d after the bursts", in/size, grown/size)
	}
	// Someone is refused: at its next shrink the ring gives back.
	if big.Take(1 << 40) {
		t.Fatal("a budget of 1 GiB gave 1 TiB")
	}
	for range 256 {
		xfer(one)
	}
	quiet := big.InUse()
	if quiet > 17*size {
		t.Errorf("after a refusal and 256 single frames %d buffers are still counted (%d after the bursts)", quiet/size, grown/size)
	}
	// A woken idle reader keeps the ring's buffers counted, no more.
	pd.Wake()
	if n, err := pd.Read(dbufs, meta, iofloor.Headroom); n != 0 || !errors.Is(err, port.ErrWoken) {
		t.Fatalf("woken Read: %d, %v", n, err)
	}
	if in := big.InUse(); in > quiet || in < 8*size {
		t.Errorf("woken: %d buffers counted, %d before", in/size, quiet/size)
	}
	// Closed: everything goes back, once the reader has seen it.
	for _, c := range []struct {
		p    *uring.Port
		b    *port.Budget
		bufs [][]byte
	}{{pb, budget, bufs}, {pd, big, dbufs}} {
		c.p.Close()
		if _, err := c.p.Read(c.bufs, meta, iofloor.Headroom); !errors.Is(err, tap.ErrClosed) {
			t.Fatalf("Read after Close: %v", err)
		}
		if in := c.b.InUse(); in != 0 {
			t.Errorf("closed: %d bytes still counted", in)
		}
	}
}

// askBlocked hands the reader its turn (ask) and returns once that Read is
// about to sleep in its ring, which blocked (uring.Blocked) tells.
func askBlocked(t *testing.T, blocked chan struct{}, ask func()) {
	t.Helper()
	for len(blocked) > 0 {
		<-blocked // from an earlier Read
	}
	ask()
	select {
	case <-blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("the Read did not go to sleep in its ring")
	}
}
