package afxdp_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/iofloor"
	"github.com/gvswitch/gvs/experiments/afxdp"
)

// lab makes veth pairs xa–xa1 and xb–xb1, mirrors xa1 → xb1 (and xb1 →
// xa1 with back), and opens AF_XDP sockets on xa and xb.
func lab(tb testing.TB, back bool, cfg afxdp.Config) (a, b *afxdp.Socket) {
	tb.Helper()
	l := iofloor.NewLab(tb)
	l.Veth("xa", "xa1")
	l.Veth("xb", "xb1")
	l.Mirror("xa1", "xb1")
	if back {
		l.Mirror("xb1", "xa1")
	}
	err := l.Do(func() (err error) {
		ca, cb := cfg, cfg
		ca.Interface, cb.Interface = "xa", "xb"
		if a, err = afxdp.Open(ca); err != nil {
			return err
		}
		b, err = afxdp.Open(cb)
		return err
	})
	if a != nil {
		tb.Cleanup(func() { a.Close() })
	}
	if b != nil {
		tb.Cleanup(func() { b.Close() })
	}
	if err != nil {
		tb.Fatal(err)
	}
	return a, b
}

// TestLoop sends frames of 64 and 1500 B from one socket and receives
// them, intact and in order, on the other, over more frames than the fill
// ring holds (so Release recycles them). Driver mode only: in generic (SKB)
// mode the frames reach the veth but are not redirected in this lab (not
// investigated; bench/results/history.md).
func TestLoop(t *testing.T) {
	for _, skb := range []bool{false} {
		a, b := lab(t, false, afxdp.Config{Frames: 256, RingSize: 64, SKBMode: skb})
		frames := make([]afxdp.Frame, 64)
		for _, size := range iofloor.Sizes[:2] {
			out, _ := iofloor.Buffers(48, size)
			for round := range 4 {
				if n, err := a.Write(out, iofloor.Headroom); n != len(out) || err != nil {
					t.Fatalf("skb %v %d B: wrote %d: %v", skb, size, n, err)
				}
				for got := 0; got < len(out); {
					n, err := b.Read(frames)
					if err != nil {
						t.Fatal(err)
					}
					for _, f := range frames[:n] {
						if !bytes.Equal(f.Buf[f.Off:f.Off+f.Len], out[got][iofloor.Headroom:]) {
							t.Fatalf("skb %v %d B round %d: frame %d differs (%d B)", skb, size, round, got, f.Len)
						}
						got++
					}
					b.Release(frames[:n])
				}
			}
		}
		if st := b.Stats(); st.Kernel.Rx_dropped != 0 || st.RxFrames != 4*96 {
			t.Errorf("skb %v: receiver stats %+v", skb, st)
		}
	}
}

// TestRefusals: veth has no zero-copy; a frame larger than a UMEM frame is
// refused; Wake ends a Read.
func TestRefusals(t *testing.T) {
	l := iofloor.NewLab(t)
	l.Veth("xz", "xz1")
	err := l.Do(func() error {
		s, err := afxdp.Open(afxdp.Config{Interface: "xz", ZeroCopy: true})
		if err == nil {
			s.Close()
		}
		return err
	})
	if !errors.Is(err, afxdp.ErrZeroCopy) {
		t.Errorf("zero-copy on veth: %v, want ErrZeroCopy", err)
	} else {
		t.Logf("zero-copy on veth refused as expected: %v", err)
	}
	a, b := lab(t, false, afxdp.Config{})
	big, _ := iofloor.Buffers(1, 3000)
	if _, err := a.Write(big, iofloor.Headroom); !errors.Is(err, afxdp.ErrTooLarge) {
		t.Errorf("3000 B frame in 2048 B UMEM frames: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]afxdp.Frame, 1))
		done <- err
	}()
	b.Wake()
	select {
	case err := <-done:
		if !errors.Is(err, afxdp.ErrClosed) {
			t.Errorf("read after Wake: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read did not return after Wake")
	}
}
