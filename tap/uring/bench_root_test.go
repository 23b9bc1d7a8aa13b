package uring_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/iofloor"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/tap/uring"
)

// BenchmarkLoop moves batches of 64 frames from TAP a to TAP b (mirred):
// one Write (one io_uring_enter for the batch) and Reads of the multishot
// completions until the batch is back, then Release.
func BenchmarkLoop(b *testing.B) {
	for _, size := range iofloor.Sizes {
		b.Run(iofloor.SizeName(size), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			const batch = 64
			bufSize := 2048
			if size > 1514 {
				bufSize = iofloor.Headroom + packet.MaxSuperFrame + 1
			}
			e, _, _ := pair(b, bufSize, 256)
			out, gso := iofloor.Buffers(batch, size)
			frames := make([]uring.Frame, batch)
			b.ReportAllocs()
			n0 := e.Stats().Syscalls
			total := 0
			m := iofloor.StartMeter()
			for b.Loop() {
				if n, err := e.Write(0, out, gso, iofloor.Headroom); n != batch || err != nil {
					b.Fatalf("wrote %d: %v", n, err)
				}
				for got := 0; got < batch; {
					n, err := e.Read(frames)
					if err != nil {
						b.Fatal(err)
					}
					e.Release(frames[:n])
					got += n
				}
				total += batch
			}
			m.Report(b, total, int(e.Stats().Syscalls-n0))
		})
	}
}

// BenchmarkForward is a switch's forwarding loop on one thread: 64 frames
// circulate; each iteration reads what the multishot read completed from
// TAP b and writes those lent frames to TAP c, whose ingress mirrors them
// back to b. "fixed" writes them with WRITE_FIXED (registered buffers),
// "plain" with WRITE.
func BenchmarkForward(b *testing.B) {
	for _, mode := range []string{"fixed", "plain"} {
		for _, size := range iofloor.Sizes[:2] {
			b.Run(mode+"/"+iofloor.SizeName(size), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				l := iofloor.NewLab(b)
				a := l.TAP("gvsua", 0)
				d := l.TAP("gvsub", 0)
				c := l.TAP("gvsuc", 0)
				l.Mirror("gvsua", "gvsub")
				l.Mirror("gvsuc", "gvsub")
				e, err := uring.New(uring.Config{RxFd: d.Fd(), TxFds: []int{a.Fd(), c.Fd()},
					Headroom: iofloor.Headroom, NoFixedBuffers: mode == "plain"})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				const batch = 64
				out, _ := iofloor.Buffers(batch, size)
				if _, err := e.Write(0, out, nil, iofloor.Headroom); err != nil {
					b.Fatal(err)
				}
				frames := make([]uring.Frame, batch)
				fwd := make([][]byte, batch)
				b.ReportAllocs()
				n0 := e.Stats().Syscalls
				total := 0
				m := iofloor.StartMeter()
				for b.Loop() {
					n, err := e.Read(frames)
					if err != nil {
						b.Fatal(err)
					}
					for i, f := range frames[:n] {
						fwd[i] = f.Buf[:iofloor.Headroom+f.Len]
					}
					if k, err := e.Write(1, fwd[:n], nil, iofloor.Headroom); k != n || err != nil {
						b.Fatalf("forwarded %d of %d: %v", k, n, err)
					}
					e.Release(frames[:n])
					total += n
				}
				m.Report(b, total, int(e.Stats().Syscalls-n0))
			})
		}
	}
}

// BenchmarkPingPong is the round trip of one 64 B frame: this thread's
// engine writes it to TAP a, an echo engine on another thread (waiting in
// io_uring_enter) receives it on TAP b and writes the lent frame back to
// b, and this engine waits for it on a.
func BenchmarkPingPong(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l := iofloor.NewLab(b)
	a := l.TAP("gvsua", 0)
	d := l.TAP("gvsub", 0)
	l.Mirror("gvsua", "gvsub")
	l.Mirror("gvsub", "gvsua")
	echoReady := make(chan *uring.Engine)
	echoDone := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		e, err := uring.New(uring.Config{RxFd: d.Fd(), TxFds: []int{d.Fd()}, Headroom: iofloor.Headroom})
		if err != nil {
			echoDone <- err
			close(echoReady)
			return
		}
		defer e.Close()
		echoReady <- e
		frames := make([]uring.Frame, 8)
		bufs := make([][]byte, 8)
		for {
			n, err := e.Read(frames)
			if err != nil {
				echoDone <- nil
				return
			}
			for i, f := range frames[:n] {
				bufs[i] = f.Buf[:iofloor.Headroom+f.Len]
			}
			if _, err := e.Write(0, bufs[:n], nil, iofloor.Headroom); err != nil {
				echoDone <- err
				return
			}
			e.Release(frames[:n])
		}
	}()
	echo := <-echoReady
	if echo == nil {
		b.Fatal(<-echoDone)
	}
	defer func() {
		echo.Wake()
		if err := <-echoDone; err != nil {
			b.Error(err)
		}
	}()
	e, err := uring.New(uring.Config{RxFd: a.Fd(), TxFds: []int{a.Fd()}, Headroom: iofloor.Headroom})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	out, _ := iofloor.Buffers(1, 64)
	frames := make([]uring.Frame, 1)
	var lat iofloor.Latencies
	b.ReportAllocs()
	n0 := e.Stats().Syscalls
	total := 0
	m := iofloor.StartMeter()
	for b.Loop() {
		t0 := time.Now()
		if _, err := e.Write(0, out, nil, iofloor.Headroom); err != nil {
			b.Fatal(err)
		}
		n, err := e.Read(frames)
		if err != nil {
			b.Fatal(err)
		}
		e.Release(frames[:n])
		lat.Add(time.Since(t0))
		total += 2
	}
	m.Report(b, total, -1)
	b.ReportMetric(float64(e.Stats().Syscalls-n0)/float64(total/2), "pinger-enters/rtt")
	lat.Report(b)
}
