package afxdp_test

import (
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/iofloor"
	"github.com/gvswitch/gvs/experiments/afxdp"
)

// BenchmarkLoop moves batches of 64 frames from the socket on veth xa to
// the one on xb (xa1 → xb1 by mirred): one Write (a copy into the UMEM per
// frame, one sendto per batch), Reads of the RX ring until the batch is
// back, Release. Copy mode, driver-mode XDP.
func BenchmarkLoop(b *testing.B) {
	for _, size := range iofloor.Sizes[:2] {
		b.Run(iofloor.SizeName(size), func(b *testing.B) {
			const batch = 64
			a, d := lab(b, false, afxdp.Config{})
			out, _ := iofloor.Buffers(batch, size)
			frames := make([]afxdp.Frame, batch)
			b.ReportAllocs()
			s0 := a.Stats().Syscalls + d.Stats().Syscalls
			total := 0
			m := iofloor.StartMeter()
			for b.Loop() {
				if n, err := a.Write(out, iofloor.Headroom); n != batch || err != nil {
					b.Fatalf("wrote %d: %v", n, err)
				}
				for got := 0; got < batch; {
					n, err := d.Read(frames)
					if err != nil {
						b.Fatal(err)
					}
					d.Release(frames[:n])
					got += n
				}
				total += batch
			}
			m.Report(b, total, int(a.Stats().Syscalls+d.Stats().Syscalls-s0))
			if st := d.Stats(); st.Kernel.Rx_dropped != 0 || a.Stats().TxDropped != 0 {
				b.Errorf("drops: rx %+v, tx %d", st.Kernel, a.Stats().TxDropped)
			}
		})
	}
}

// BenchmarkPingPong is the round trip of one 64 B frame: written on xa,
// echoed by a goroutine waiting in poll(2) on xb, read back on xa.
func BenchmarkPingPong(b *testing.B) {
	a, d := lab(b, true, afxdp.Config{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		frames := make([]afxdp.Frame, 8)
		bufs := make([][]byte, 8)
		for {
			n, err := d.Read(frames)
			if err != nil {
				return
			}
			for i, f := range frames[:n] {
				bufs[i] = f.Buf[:f.Off+f.Len]
			}
			if _, err := d.Write(bufs[:n], frames[0].Off); err != nil {
				return
			}
			d.Release(frames[:n])
		}
	}()
	defer func() { d.Wake(); <-done }()
	out, _ := iofloor.Buffers(1, 64)
	frames := make([]afxdp.Frame, 1)
	var lat iofloor.Latencies
	b.ReportAllocs()
	total := 0
	m := iofloor.StartMeter()
	for b.Loop() {
		t0 := time.Now()
		if _, err := a.Write(out, iofloor.Headroom); err != nil {
			b.Fatal(err)
		}
		n, err := a.Read(frames)
		if err != nil {
			b.Fatal(err)
		}
		a.Release(frames[:n])
		lat.Add(time.Since(t0))
		total += 2
	}
	m.Report(b, total, -1)
	lat.Report(b)
}
