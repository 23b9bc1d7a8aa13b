package uring_test

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/gvswitch/gvs/bench/iofloor"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/tap/uring"
)

// pair makes TAPs a → b (mirred), TSO on b, and an engine on the calling
// (locked) thread that writes to a and receives from b.
func pair(tb testing.TB, bufSize, buffers int) (*uring.Engine, *tap.Device, *tap.Device) {
	tb.Helper()
	l := iofloor.NewLab(tb)
	a := l.TAP("gvsua", tap.OffloadsTSO)
	b := l.TAP("gvsub", tap.OffloadsTSO)
	l.Mirror("gvsua", "gvsub")
	e, err := uring.New(uring.Config{RxFd: b.Fd(), TxFds: []int{a.Fd()}, BufSize: bufSize, Buffers: buffers,
		Headroom: iofloor.Headroom})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e, a, b
}

// TestEngineLoop writes batches of every size through the engine and
// reads them back from the multishot read: the bytes and the TSO metadata
// must survive, over many more frames than the engine has buffers (so
// Release recycles them and a multishot read that ran out of buffers is
// armed again).
func TestEngineLoop(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e, _, _ := pair(t, iofloor.Headroom+packet.MaxSuperFrame+1, 16)
	frames := make([]uring.Frame, 64)
	for _, size := range iofloor.Sizes {
		out, gso := iofloor.Buffers(24, size)
		for round := range 4 {
			if n, err := e.Write(0, out, gso, iofloor.Headroom); n != len(out) || err != nil {
				t.Fatalf("%d B: wrote %d: %v", size, n, err)
			}
			got := 0
			for got < len(out) {
				n, err := e.Read(frames)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range frames[:n] {
					want := out[got][iofloor.Headroom:]
					if !bytes.Equal(f.Buf[iofloor.Headroom:iofloor.Headroom+f.Len], want) {
						t.Fatalf("%d B round %d: frame %d differs (got %d B, seq %d)", size, round, got, f.Len,
							iofloor.Seq(f.Buf[iofloor.Headroom:iofloor.Headroom+f.Len]))
					}
					if f.GSO.IsGSO() != gso[got].IsGSO() || f.GSO.Size != gso[got].Size {
						t.Fatalf("%d B: GSO %+v, sent %+v", size, f.GSO, gso[got])
					}
					got++
				}
				e.Release(frames[:n])
			}
		}
	}
	st := e.Stats()
	if st.RxDrops != 0 || st.TxErrors != 0 || st.RxFrames != st.TxFrames {
		t.Errorf("stats %+v", st)
	}
	if st.RxRearms == 0 {
		t.Errorf("16 buffers for 24-frame batches and the multishot read never ran out: %+v", st)
	}
}

// TestEngineForwardFixed forwards lent frames (in the engine's registered
// buffers, so written with WRITE_FIXED) back out and checks them.
func TestEngineForwardFixed(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l := iofloor.NewLab(t)
	a := l.TAP("gvsua", 0)
	b := l.TAP("gvsub", 0)
	c := l.TAP("gvsuc", 0)
	l.Mirror("gvsua", "gvsub")
	l.Mirror("gvsuc", "gvsub") // what the engine forwards to c comes back on b
	e, err := uring.New(uring.Config{RxFd: b.Fd(), TxFds: []int{a.Fd(), c.Fd()}, Headroom: iofloor.Headroom})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	out, _ := iofloor.Buffers(8, 1500)
	if n, err := e.Write(0, out, nil, iofloor.Headroom); n != 8 || err != nil {
		t.Fatalf("wrote %d: %v", n, err)
	}
	frames := make([]uring.Frame, 8)
	got := 0
	fwd := make([][]byte, 0, 8)
	for got < 8 {
		n, err := e.Read(frames[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	for _, f := range frames {
		fwd = append(fwd, f.Buf[:iofloor.Headroom+f.Len])
	}
	// Forwarded to c, whose ingress mirrors to b: they come back.
	if n, err := e.Write(1, fwd, nil, iofloor.Headroom); n != 8 || err != nil {
		t.Fatalf("forwarded %d: %v", n, err)
	}
	e.Release(frames)
	for got = 0; got < 8; {
		n, err := e.Read(frames[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	for i, f := range frames {
		if !bytes.Equal(f.Buf[iofloor.Headroom:iofloor.Headroom+f.Len], out[i][iofloor.Headroom:]) {
			t.Fatalf("forwarded frame %d differs", i)
		}
	}
}

// TestEngineRefusals: a frame larger than a receive buffer is dropped and
// counted, not returned cut; a buffer without headroom is refused; Wake
// ends a Read.
func TestEngineRefusals(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e, _, _ := pair(t, iofloor.Headroom+1000, 16)
	big, _ := iofloor.Buffers(1, 1500)
	small, _ := iofloor.Buffers(1, 64)
	if _, err := e.Write(0, [][]byte{big[0][:5]}, nil, iofloor.Headroom); !errors.Is(err, uring.ErrHeadroom) {
		t.Errorf("write of a buffer shorter than the offset: %v", err)
	}
	if _, err := e.Write(0, small, nil, 4); !errors.Is(err, uring.ErrHeadroom) {
		t.Errorf("write with offset 4: %v", err)
	}
	if _, err := e.Write(0, append(big, small...), nil, iofloor.Headroom); err != nil {
		t.Fatal(err)
	}
	frames := make([]uring.Frame, 4)
	n, err := e.Read(frames)
	if err != nil || n != 1 || frames[0].Len != 64 {
		t.Fatalf("read %d (%v), first %d B: want only the 64 B frame", n, err, frames[0].Len)
	}
	e.Release(frames[:n])
	if st := e.Stats(); st.RxDrops != 1 {
		t.Errorf("drops %d, want 1 (the 1500 B frame in a 1000 B buffer)", st.RxDrops)
	}
	e.Wake()
	if _, err := e.Read(frames); !errors.Is(err, uring.ErrClosed) {
		t.Errorf("read after Wake: %v", err)
	}
}
