package gen

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pairBlaster returns a Blaster writing to one end of a datagram socket
// pair, and the other end.
func pairBlaster(t *testing.T, cfg BlastConfig, nonblock bool) (*Blaster, int) {
	t.Helper()
	typ := unix.SOCK_DGRAM | unix.SOCK_CLOEXEC
	if nonblock {
		typ |= unix.SOCK_NONBLOCK
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, typ, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	// A send that blocks for a second (the reader gave up) fails instead
	// of hanging the test.
	tv := unix.NsecToTimeval(int64(time.Second))
	_ = unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	spec := testSpec(cfg.Size, max(cfg.Flows, 1))
	fb, err := NewFrameBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Flows = spec.Flows
	b := &Blaster{cfg: cfg, fb: fb, senders: []*sender{newSender(fb, fds[0], 0, uint32(spec.Flows))}}
	t.Cleanup(func() { b.Close() })
	return b, fds[1]
}

// TestBlastAllocs: the send loop allocates nothing per frame or batch.
func TestBlastAllocs(t *testing.T) {
	b, _ := pairBlaster(t, BlastConfig{Size: 64, Flows: 64}, true)
	if n := testing.AllocsPerRun(200, func() {
		if _, _, err := b.senders[0].sendBatch(blastBatch); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per batch", n)
	}
}

// TestBlastLoopAllocs: a whole paced send loop (token bucket, sleeps,
// batches) allocates nothing either.
func TestBlastLoopAllocs(t *testing.T) {
	b, _ := pairBlaster(t, BlastConfig{Size: 64, Flows: 64}, true)
	ctx := context.Background()
	for _, rate := range []float64{0, 200000} {
		if n := testing.AllocsPerRun(20, func() {
			now := time.Now()
			if _, _, err := b.senders[0].run(ctx, rate, now, now.Add(2*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("rate %v: %v allocations per 2 ms loop", rate, n)
		}
	}
}

// TestBlastRateAndFlows runs the token bucket against a socket pair whose
// other end is drained: the frames sent must match the rate, and each
// frame read must be a valid blaster frame, flows round robin. The rate is
// low so that a loaded machine does not starve the sender; the bound above
// (the bucket must never overshoot) is tighter than the one below.
func TestBlastRateAndFlows(t *testing.T) {
	const rate, flows = 5000, 7
	b, peer := pairBlaster(t, BlastConfig{Size: 100, Flows: flows, Rate: rate, Duration: 500 * time.Millisecond}, false)
	got := make(chan [flows]int, 1)
	var senderDone atomic.Bool
	go func() {
		var per [flows]int
		buf := make([]byte, 200)
		tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
		_ = unix.SetsockoptTimeval(peer, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		var next uint64
		for {
			n, err := unix.Read(peer, buf)
			// With SO_RCVTIMEO set, a read interrupted by a signal (the Go
			// runtime's preemption signal, say) fails with EINTR instead of
			// restarting: read again.
			if err == unix.EINTR || err == unix.EAGAIN && !senderDone.Load() {
				continue
			}
			if err != nil {
				break
			}
			f, ok := ParseBlastFrame(buf[:n])
			if !ok || n != 100 || f.Seq != next || f.Flow != uint32(next%flows) {
				t.Errorf("frame %d: %+v ok=%v len %d", next, f, ok, n)
				break
			}
			per[f.Flow]++
			next++
		}
		got <- per
	}()
	res, err := b.Run(context.Background())
	senderDone.Store(true)
	if err != nil {
		t.Fatal(err)
	}
	per := <-got
	want := rate * res.Duration.Seconds()
	// The pacer must never exceed the rate; how close it gets from below
	// depends on the CPU the machine gives the sender (shared, loaded
	// machines fall behind), so only progress is required there.
	if f := float64(res.Frames); f < 0.5*want || f > 1.05*want+blastBatch {
		t.Errorf("sent %d frames in %v at %d/s, want ≈%.0f", res.Frames, res.Duration, rate, want)
	}
	total := 0
	for _, c := range per {
		total += c
	}
	if uint64(total) != res.Frames || res.Dropped != 0 {
		t.Errorf("read %d of %d frames (%d dropped); per flow %v", total, res.Frames, res.Dropped, per)
	}
	if per[0]-per[flows-1] > 1 || per[0] < per[flows-1] {
		t.Errorf("flows not round robin: %v", per)
	}
}

// TestNewBlasterRejects checks the configuration errors that come before
// any socket is opened.
func TestNewBlasterRejects(t *testing.T) {
	dst := netip.MustParseAddr("10.77.0.2")
	for _, c := range []struct {
		cfg  BlastConfig
		want error
	}{
		{BlastConfig{Dev: "lo", Dst: dst, Size: 63}, ErrFrameSize},
		{BlastConfig{Dev: "lo", Dst: dst, Size: 9001}, ErrFrameSize},
		{BlastConfig{Dev: "lo", Dst: dst, Size: 64, Flows: 1, Threads: 2}, nil},
		{BlastConfig{Dev: "lo", Dst: dst, Size: 64, Rate: -1}, nil},
		{BlastConfig{Dev: "gvs-no-such-dev", Dst: dst, Size: 64}, nil},
	} {
		b, err := NewBlaster(c.cfg)
		if err == nil {
			b.Close()
			t.Errorf("%+v accepted", c.cfg)
		} else if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%+v: err %v, want %v", c.cfg, err, c.want)
		}
	}
}

// FuzzBlastSegments: whatever virtio_net_hdr and length the kernel reports
// for a frame ParseBlastFrame accepted, the receiver counts at least one
// datagram, and a GSO super-frame's datagrams cover its payload at the
// segment size (the last one shorter) and count their headers each.
func FuzzBlastSegments(f *testing.F) {
	fb, _ := NewFrameBuilder(testSpec(64, 4))
	good := make([]byte, 64)
	fb.Build(good, 3, 42)
	f.Add(make([]byte, rxVnet), good, 64)
	gso := make([]byte, rxVnet)
	gso[1], gso[4] = 5, 100 // VIRTIO_NET_HDR_GSO_UDP_L4, 100-byte segments
	f.Add(gso, good, 502)
	f.Add(gso, good, 0)
	f.Fuzz(func(t *testing.T, vnet, b []byte, l int) {
		if len(vnet) < rxVnet {
			return
		}
		if _, ok := ParseBlastFrame(b); !ok || l < 0 || l > 1<<18 {
			return
		}
		segs, bytes := blastSegments(vnet, b, l)
		if segs < 1 {
			t.Fatalf("%d datagrams", segs)
		}
		gsoType, gsoSize := vnet[1]&^0x80, uint64(binary.LittleEndian.Uint16(vnet[4:6]))
		if gsoType == 0 || gsoSize == 0 {
			if segs != 1 {
				t.Fatalf("a plain frame counted as %d", segs)
			}
			return
		}
		hdr := uint64(ethLen + int(b[ethLen]&0x0f)*4 + udpLen)
		payload := bytes - segs*hdr
		if bytes < segs*hdr || payload > segs*gsoSize || (payload > 0 && payload <= (segs-1)*gsoSize) {
			t.Fatalf("%d datagrams of %d bytes for a %d-byte frame, segment size %d", segs, bytes, l, gsoSize)
		}
	})
}
