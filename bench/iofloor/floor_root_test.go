package iofloor_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/iofloor"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/tap"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// tapPair makes TAPs a and b, TSO on b (super-frames come out whole),
// joined by mirred from a's ingress to b's egress, and back when both is
// set.
func tapPair(tb testing.TB, both bool) (a, b *tap.Device) {
	l := iofloor.NewLab(tb)
	a = l.TAP("gvsfa", tap.OffloadsTSO)
	b = l.TAP("gvsfb", tap.OffloadsTSO)
	l.Mirror("gvsfa", "gvsfb")
	if both {
		l.Mirror("gvsfb", "gvsfa")
	}
	return a, b
}

// readN reads n frames from d into bufs and returns the number of read(2)
// calls it took: one per frame, and one more that found the queue empty
// for each Read that came back short.
func readN(tb testing.TB, d *tap.Device, bufs [][]byte, meta []port.Meta, n int) int {
	calls := 0
	for got := 0; got < n; {
		k, err := d.Read(bufs[got:n], meta[got:n], iofloor.Headroom)
		if err != nil {
			tb.Fatalf("read: %v", err)
		}
		calls += k
		if k < n-got {
			calls++
		}
		got += k
	}
	return calls
}

// TestTAPLoop checks the lab itself: frames of every size written to one
// TAP come out of the other whole, in order, super-frames with their TSO
// metadata.
func TestTAPLoop(t *testing.T) {
	a, b := tapPair(t, false)
	for _, size := range iofloor.Sizes {
		out, gso := iofloor.Buffers(8, size)
		if n, err := a.Write(out, metaOf(out, gso), iofloor.Headroom); n != len(out) || err != nil {
			t.Fatalf("%d B: wrote %d: %v", size, n, err)
		}
		in := make([][]byte, len(out))
		for i := range in {
			in[i] = make([]byte, iofloor.Headroom+packet.MaxSuperFrame+1)
		}
		meta := make([]port.Meta, len(in))
		if err := b.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		readN(t, b, in, meta, len(in))
		for i := range in {
			got := in[i][iofloor.Headroom : iofloor.Headroom+meta[i].Size]
			if !bytes.Equal(got, out[i][iofloor.Headroom:]) {
				t.Fatalf("%d B: frame %d differs (got %d B, seq %d)", size, i, meta[i].Size, iofloor.Seq(got))
			}
			if meta[i].GSO.IsGSO() != gso[i].IsGSO() || meta[i].GSO.Size != gso[i].Size {
				t.Fatalf("%d B: frame %d: GSO %+v, sent %+v", size, i, meta[i].GSO, gso[i])
			}
		}
	}
}

// TestTAPLoopNoLeak checks the refusal side of the lab: with no mirror,
// nothing written to a reaches b.
func TestTAPLoopNoLeak(t *testing.T) {
	l := iofloor.NewLab(t)
	a := l.TAP("gvsfa", 0)
	b := l.TAP("gvsfb", 0)
	out, gso := iofloor.Buffers(4, 64)
	if _, err := a.Write(out, metaOf(out, gso), iofloor.Headroom); err != nil {
		t.Fatal(err)
	}
	if err := b.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	in := [][]byte{make([]byte, 2048)}
	if n, err := b.Read(in, make([]port.Meta, 1), iofloor.Headroom); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d frames (%v) from an unconnected TAP", n, err)
	}
}

// BenchmarkTAPLoop moves frames from TAP a to TAP b through mirred:
// Device.Write of a batch of 64 (one write(2) per frame), then
// Device.Read until the batch is back (one read(2) per frame, plus one
// read that finds the queue empty per call that came back short).
func BenchmarkTAPLoop(b *testing.B) {
	for _, size := range iofloor.Sizes {
		b.Run(iofloor.SizeName(size), func(b *testing.B) {
			const batch = 64
			a, d := tapPair(b, false)
			out, gso := iofloor.Buffers(batch, size)
			in := make([][]byte, batch)
			for i := range in {
				in[i] = make([]byte, iofloor.Headroom+packet.MaxSuperFrame+1)
			}
			meta := make([]port.Meta, batch)
			wmeta := metaOf(out, gso)
			b.ReportAllocs()
			frames, calls := 0, 0
			m := iofloor.StartMeter()
			for b.Loop() {
				if n, err := a.Write(out, wmeta, iofloor.Headroom); n != batch || err != nil {
					b.Fatalf("wrote %d: %v", n, err)
				}
				calls += batch + readN(b, d, in, meta, batch)
				frames += batch
			}
			m.Report(b, frames, calls)
		})
	}
}

// BenchmarkTAPPingPong is the round trip of one 64 B frame: this goroutine
// writes it to TAP a, an echo goroutine waiting in Device.Read (Go's
// netpoller) on TAP b writes it back, and this goroutine waits for it on
// a. Two wake-ups per round trip, as through a switch worker.
func BenchmarkTAPPingPong(b *testing.B) {
	a, d := tapPair(b, true)
	go func() {
		buf := [][]byte{make([]byte, 2048)}
		meta := make([]port.Meta, 1)
		for {
			n, err := d.Read(buf, meta, iofloor.Headroom)
			if err != nil {
				return
			}
			meta[0].GSO = packet.GSO{}
			if _, err := d.Write([][]byte{buf[0][:iofloor.Headroom+meta[0].Size]}, meta, iofloor.Headroom); err != nil && n > 0 {
				return
			}
		}
	}()
	b.Cleanup(func() { d.Close() })
	out, gso := iofloor.Buffers(1, 64)
	wmeta := metaOf(out, gso)
	in := [][]byte{make([]byte, 2048)}
	rmeta := make([]port.Meta, 1)
	var lat iofloor.Latencies
	b.ReportAllocs()
	frames := 0
	m := iofloor.StartMeter()
	for b.Loop() {
		t0 := time.Now()
		if _, err := a.Write(out, wmeta, iofloor.Headroom); err != nil {
			b.Fatal(err)
		}
		if _, err := a.Read(in, rmeta, iofloor.Headroom); err != nil {
			b.Fatal(err)
		}
		lat.Add(time.Since(t0))
		frames += 2
	}
	m.Report(b, frames, -1)
	lat.Report(b)
}

// udpPair opens two UDP sockets on 127.0.0.1 in a lab namespace.
func udpPair(tb testing.TB) (s, r *net.UDPConn) {
	l := iofloor.NewLab(tb)
	err := l.Do(func() (err error) {
		if s, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			return err
		}
		r, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close(); r.Close() })
	for _, c := range []*net.UDPConn{s, r} {
		if err := c.SetReadBuffer(8 << 20); err != nil {
			tb.Fatal(err)
		}
	}
	return s, r
}

// BenchmarkUDPMmsg is the tunnel port's mechanism: sendmmsg of 64
// datagrams carrying a VXLAN header and a frame of the given size (50 B
// more than the frame on the wire) on one socket, recvmmsg on another, on
// the namespace's loopback.
func BenchmarkUDPMmsg(b *testing.B) {
	for _, size := range iofloor.Sizes[:2] {
		b.Run(iofloor.SizeName(size), func(b *testing.B) {
			const batch = 64
			s, r := udpPair(b)
			ps, pr := ipv4.NewPacketConn(s), ipv4.NewPacketConn(r)
			dst := r.LocalAddr()
			out := make([]ipv4.Message, batch)
			in := make([]ipv4.Message, batch)
			for i := range out {
				out[i] = ipv4.Message{Buffers: [][]byte{make([]byte, 8+size)}, Addr: dst}
				in[i] = ipv4.Message{Buffers: [][]byte{make([]byte, 2048)}}
			}
			b.ReportAllocs()
			frames, calls := 0, 0
			m := iofloor.StartMeter()
			for b.Loop() {
				for sent := 0; sent < batch; {
					n, err := ps.WriteBatch(out[sent:], 0)
					if err != nil {
						b.Fatal(err)
					}
					sent += n
					calls++
				}
				for got := 0; got < batch; {
					n, err := pr.ReadBatch(in[got:], 0)
					if err != nil {
						b.Fatal(err)
					}
					got += n
					calls++
				}
				frames += batch
			}
			m.Report(b, frames, calls)
		})
	}
}

// BenchmarkUDPPingPong is the round trip of one 64 B frame in a VXLAN
// datagram between two UDP sockets, the echo side a goroutine waiting in
// the netpoller.
func BenchmarkUDPPingPong(b *testing.B) {
	s, r := udpPair(b)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := r.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if _, err := r.WriteToUDPAddrPort(buf[:n], from); err != nil {
				return
			}
		}
	}()
	dst := r.LocalAddr().(*net.UDPAddr).AddrPort()
	msg := make([]byte, 8+64)
	buf := make([]byte, 2048)
	var lat iofloor.Latencies
	b.ReportAllocs()
	frames := 0
	m := iofloor.StartMeter()
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.WriteToUDPAddrPort(msg, dst); err != nil {
			b.Fatal(err)
		}
		if _, _, err := s.ReadFromUDPAddrPort(buf); err != nil {
			b.Fatal(err)
		}
		lat.Add(time.Since(t0))
		frames += 2
	}
	m.Report(b, frames, -1)
	lat.Report(b)
}

// BenchmarkSyscall is the floor under every system call here: getppid(2),
// which does nothing in the kernel, through unix.Syscall as the I/O code
// calls the kernel (entersyscall/exitsyscall included).
func BenchmarkSyscall(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		unix.Syscall(unix.SYS_GETPPID, 0, 0, 0)
	}
}

// BenchmarkEventfdKick is the user side of a vhost kick (or of any
// eventfd notification): one 8-byte write(2) to an eventfd nobody waits
// on. A kick that wakes a sleeping vhost worker costs a wake-up on top.
func BenchmarkEventfdKick(b *testing.B) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := unix.Write(fd, one); err != nil {
			b.Fatal(err)
		}
	}
}

// metaOf is the port metadata of frames out (each after the headroom)
// with their GSO metadata.
func metaOf(out [][]byte, gso []packet.GSO) []port.Meta {
	m := make([]port.Meta, len(out))
	for i := range out {
		m[i] = port.Meta{Size: len(out[i]) - iofloor.Headroom, GSO: gso[i]}
	}
	return m
}
