package uring_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/iofloor"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/port/busypoll"
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/tap/uring"
)

// TestPortBusyPoll: a reader that polls (PortConfig.BusyPoll) gets frames
// sent one by one with short gaps in order, none lost or repeated, and
// some of them by polling (a sleep saved); Wake and Close still end a
// Read of a reader whose window is open.
func TestPortBusyPoll(t *testing.T) {
	bp, err := busypoll.New(busypoll.Config{Max: busypoll.MaxWindow, Pollers: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, pa, pb := portPairConfig(t, uring.PortConfig{Always: true, BusyPoll: bp})
	bufs, _ := buffers(8, iofloor.Headroom+2048)
	meta := make([]port.Meta, len(bufs))
	const frames = 400
	type result struct {
		seqs []uint64
		err  error
	}
	// Reads come from one goroutine, which the first Read locks to its
	// thread.
	reqs, res := make(chan int), make(chan result)
	go func() {
		for want := range reqs {
			var r result
			for len(r.seqs) < want || want == 0 {
				n, err := pb.Read(bufs, meta, iofloor.Headroom)
				for i := range n {
					r.seqs = append(r.seqs, iofloor.Seq(bufs[i][iofloor.Headroom:iofloor.Headroom+meta[i].Size]))
				}
				if err != nil {
					r.err = err
					break
				}
			}
			res <- r
		}
	}()
	defer close(reqs)
	blocked := uring.Blocked(pb)
	reqs <- frames
	out, _ := iofloor.Buffers(frames, 64)
	for i := range out {
		if n, err := pa.Write(out[i:i+1], metas(out[i:i+1], nil), iofloor.Headroom); n != 1 || err != nil {
			t.Fatalf("frame %d: wrote %d: %v", i, n, err)
		}
		// A gap well within the bound: the reader's window grows to
		// cover it.
		for start := time.Now(); time.Since(start) < 20*time.Microsecond; {
		}
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.seqs) != frames {
		t.Fatalf("read %d frames, sent %d", len(r.seqs), frames)
	}
	for i, s := range r.seqs {
		if want := iofloor.Seq(out[i][iofloor.Headroom:]); s != want {
			t.Fatalf("frame %d: sequence %d, want %d", i, s, want)
		}
	}
	st := bp.Stats()
	if st.Polls == 0 || st.Found == 0 || st.Time <= 0 {
		t.Errorf("%d frames with 20 µs gaps and a 1 ms bound: stats %+v, want polls that found frames", frames, st)
	}
	t.Logf("busy polling: %+v", st)

	// Wake and Close end a Read (the window is open: the last sleeps
	// were short).
	askBlocked(t, blocked, func() { reqs <- 0 })
	pb.Wake()
	if r := <-res; !errors.Is(r.err, port.ErrWoken) {
		t.Fatalf("after Wake: %v", r.err)
	}
	askBlocked(t, blocked, func() { reqs <- 0 })
	if err := pb.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if !errors.Is(r.err, tap.ErrClosed) {
			t.Fatalf("after Close: %v", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the Read")
	}
}
