package tap_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/tap"
	"golang.org/x/sys/unix"
)

// benchTAP creates an up TAP in a namespace of its own for a benchmark.
func benchTAP(b *testing.B, suffix string) *tap.Device {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	name := fmt.Sprintf("gvst-tap-%d-%s", os.Getpid(), suffix)
	nsPath, err := netconf.CreateNamedNS(name)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := netconf.DeleteNamedNS(name); err != nil {
			b.Errorf("delete netns: %v", err)
		}
	})
	var dev *tap.Device
	if err := netconf.Do(nsPath, func() (err error) {
		dev, err = tap.Create(tap.Config{Name: "gvst-tapb"})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dev.Close() })
	err = netconf.ConfigureLink(nsPath, netconf.LinkConfig{
		Name: dev.Name(), MAC: kernelMAC[:], MTU: 1500,
		Addrs: []netip.Prefix{netip.PrefixFrom(kernelIP, 24)}, Up: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	return dev
}

// otherHostFrame is a 64-byte UDP frame to another host's MAC: the kernel
// drops it right after the TAP write (PACKET_OTHERHOST), so the benchmarks
// below measure the write path itself.
func otherHostFrame() [][]byte {
	bufs, _ := newBufs(1)
	bufs[0] = udpFrame(bufs[0], 1000, 2000, make([]byte, 64-14-20-8))
	e := packet.Ethernet(bufs[0][headroom:])
	e.SetDst([6]byte{0x0a, 0x58, 1, 2, 3, 4})
	return bufs
}

// BenchmarkTAPWrite is Device.Write of one 64-byte frame per call (one
// write(2) each), the switch's path toward a pod.
func BenchmarkTAPWrite(b *testing.B) {
	dev := benchTAP(b, "bw")
	bufs := otherHostFrame()
	meta := sized(bufs)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := dev.Write(bufs, meta, headroom); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTAPWriteRawSyscall is the lower bound of BenchmarkTAPWrite: the
// same frame (with a zero virtio_net_hdr) written with a bare write(2) on
// the descriptor, without os.File, poll.FD or statistics.
func BenchmarkTAPWriteRawSyscall(b *testing.B) {
	dev := benchTAP(b, "br")
	bufs := otherHostFrame()
	pkt := bufs[0][headroom-tap.VnetHdrLen:]
	clear(pkt[:tap.VnetHdrLen])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := unix.Write(dev.Fd(), pkt); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTAPWrite8 is Device.Write of a batch of 8 such frames per call
// (eight write(2) calls); ns/op is per frame.
func BenchmarkTAPWrite8(b *testing.B) {
	dev := benchTAP(b, "b8")
	one := otherHostFrame()
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = append([]byte(nil), one[0]...)
	}
	meta := sized(bufs)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := dev.Write(bufs, meta, headroom); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(8*b.N), "ns/frame")
}
