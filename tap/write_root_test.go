package tap_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/gvswitch/gvs/tap"
)

// TestTAPConcurrentWriters has four goroutines write batches to one TAP
// (as the switch's workers do) and checks that every frame is counted once,
// that a batch with a short buffer stops there with ErrHeadroom, and that
// writers racing with Close get ErrClosed, never another error.
func TestTAPConcurrentWriters(t *testing.T) {
	needRoot(t)
	dev, _, _ := upTAP(t, "cw", tap.Config{Name: "gvst-tapcw"})
	const writers, batches, batch = 4, 200, 5
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one := otherHostFrame()
			bufs := make([][]byte, batch)
			for i := range bufs {
				bufs[i] = append([]byte(nil), one[0]...)
			}
			meta := sized(bufs)
			for range batches {
				n, err := dev.Write(bufs, meta, headroom)
				if err != nil || n != batch {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("Write: %v", err)
	}
	frameLen := len(otherHostFrame()[0]) - headroom
	st := dev.Stats()
	if st.TxPackets != writers*batches*batch || st.TxBytes != uint64(writers*batches*batch*frameLen) || st.TxErrors != 0 {
		t.Fatalf("stats %+v", st)
	}

	// A short buffer in the middle of a batch: shorter than the headroom,
	// or than the frame its Meta describes.
	bufs := append(otherHostFrame(), make([]byte, headroom-1))
	bufs = append(bufs, otherHostFrame()...)
	if n, err := dev.Write(bufs, sized(bufs), headroom); n != 1 || !errors.Is(err, tap.ErrHeadroom) {
		t.Errorf("short buffer: %d, %v", n, err)
	}
	bufs = append(otherHostFrame(), otherHostFrame()...)
	meta := sized(bufs)
	meta[1].Size++
	if n, err := dev.Write(bufs, meta, headroom); n != 1 || !errors.Is(err, tap.ErrHeadroom) {
		t.Errorf("frame past its buffer: %d, %v", n, err)
	}

	// Writers racing with Close.
	errc = make(chan error, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs := otherHostFrame()
			meta := sized(bufs)
			for {
				if _, err := dev.Write(bufs, meta, headroom); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if !errors.Is(err, tap.ErrClosed) {
			t.Errorf("Write during Close: %v, want ErrClosed", err)
		}
	}
}
