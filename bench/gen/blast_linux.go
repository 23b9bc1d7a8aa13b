package gen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The frame blaster, one batch at a time:
//
//  1. Refill the token bucket (rate > 0) and take up to blastBatch tokens,
//     sleeping until a millisecond's worth of frames is due when the bucket
//     is short.
//  2. Patch the next n frames in the batch's own buffers (source port,
//     flow, sequence number, UDP checksum): flows go round robin.
//  3. sendmmsg them on an AF_PACKET socket bound to the device, with
//     PACKET_QDISC_BYPASS so they go straight to the driver. A frame the
//     device refuses (ENOBUFS: its queue or the peer's backlog is full) is
//     counted as dropped and skipped, never retried: it was offered.
//
// With Threads > 1 each thread has its own socket, buffers, share of the
// rate and share of the flows. The kernel's own dataplane (veth, bridge,
// vxlan) forwards a frame in the softirq of the CPU that sent it, so one
// sending thread gives the kernel one CPU: more threads let it use more.
//
// The loop allocates nothing (TestBlastAllocs).

// blastBatch is the number of frames per sendmmsg.
const blastBatch = 64

// ErrMTU is returned (wrapped, naming the MTU) for a frame size above the
// device's MTU plus the 14-byte Ethernet header.
var ErrMTU = errors.New("gen: frame larger than the device's MTU")

// BlastConfig configures NewBlaster.
type BlastConfig struct {
	// Dev is the interface to send on.
	Dev string
	// Dst is the destination IPv4 address.
	Dst netip.Addr
	// DstMAC is the destination MAC; nil: the next hop's, from the route to
	// Dst and the neighbour table (ARP is triggered if needed).
	DstMAC net.HardwareAddr
	// Src is the source address; zero: the route's preferred source.
	Src netip.Addr
	// DstPort is the UDP destination port, default 9000.
	DstPort uint16
	// BasePort is the source port of flow 0, default 10000.
	BasePort uint16
	// Size is the Ethernet frame size without FCS, MinFrame..MaxFrame and at
	// most the device's MTU + 14.
	Size int
	// Flows is the number of flows (distinct source ports), default 1.
	Flows int
	// Rate is the frames per second offered, 0 for as fast as possible.
	Rate int
	// Threads is the number of sending threads (sockets), default 1, at
	// most Flows.
	Threads int
	// Duration is how long Run sends.
	Duration time.Duration
}

// BlastResult is what Run sent.
type BlastResult struct {
	// Frames were accepted by the device.
	Frames uint64 `json:"frames"`
	Bytes  uint64 `json:"bytes"`
	// Dropped frames were refused by the device (ENOBUFS), i.e. by the
	// dataplane behind it; they count as offered.
	Dropped  uint64        `json:"dropped"`
	Duration time.Duration `json:"duration"`
	Size     int           `json:"size"`
	Flows    int           `json:"flows"`
	Rate     int           `json:"rate"`
	Threads  int           `json:"threads"`
	// QdiscBypass tells whether PACKET_QDISC_BYPASS could be set.
	QdiscBypass bool `json:"qdisc_bypass"`
}

// Offered returns the frames offered: accepted plus dropped.
func (r BlastResult) Offered() uint64 { return r.Frames + r.Dropped }

// PPS returns the frames accepted per second.
func (r BlastResult) PPS() float64 { return perSecond(r.Frames, r.Duration) }

// OfferedPPS returns the frames offered per second.
func (r BlastResult) OfferedPPS() float64 { return perSecond(r.Offered(), r.Duration) }

// Blaster sends raw UDP frames on one device. NewBlaster resolves
// everything in the calling thread's network namespace; the sockets stay in
// that namespace, so Run may be called from anywhere. A Blaster is not safe
// for concurrent use.
type Blaster struct {
	cfg     BlastConfig
	fb      *FrameBuilder
	bypass  bool
	senders []*sender
}

// sender is one sending thread's socket and batch: it sends flows lo..hi-1
// round robin.
type sender struct {
	fd          int
	fb          *FrameBuilder
	bufs        [][]byte
	iovs        []unix.Iovec
	msgs        []unix.Mmsghdr
	lo, hi, cur uint32
	seq         uint64
}

// NewBlaster opens an AF_PACKET socket on cfg.Dev and prepares the frames.
// It needs CAP_NET_RAW.
func NewBlaster(cfg BlastConfig) (*Blaster, error) {
	if cfg.DstPort == 0 {
		cfg.DstPort = 9000
	}
	if cfg.BasePort == 0 {
		cfg.BasePort = 10000
	}
	cfg.Flows = max(cfg.Flows, 1)
	cfg.Threads = max(cfg.Threads, 1)
	if cfg.Threads > cfg.Flows || cfg.Threads > 64 {
		return nil, fmt.Errorf("gen: blast: %d threads for %d flows (want 1..min(flows, 64))", cfg.Threads, cfg.Flows)
	}
	if cfg.Rate < 0 {
		return nil, fmt.Errorf("gen: blast rate %d", cfg.Rate)
	}
	if cfg.Size < MinFrame || cfg.Size > MaxFrame {
		return nil, fmt.Errorf("%w: %d B (want %d..%d)", ErrFrameSize, cfg.Size, MinFrame, MaxFrame)
	}
	ifc, err := net.InterfaceByName(cfg.Dev)
	if err != nil {
		return nil, fmt.Errorf("gen: blast: %w", err)
	}
	if cfg.Size > ifc.MTU+ethLen {
		return nil, fmt.Errorf("%w: %d B on %s, whose MTU %d allows at most %d B frames", ErrMTU, cfg.Size, cfg.Dev, ifc.MTU, ifc.MTU+ethLen)
	}
	if len(ifc.HardwareAddr) != 6 {
		return nil, fmt.Errorf("gen: blast: %s has no Ethernet address", cfg.Dev)
	}
	if !cfg.Dst.Is4() {
		return nil, fmt.Errorf("gen: blast: destination %v is not IPv4", cfg.Dst)
	}
	if !cfg.Src.IsValid() || cfg.DstMAC == nil {
		src, mac, err := resolve(ifc, cfg.Dst, cfg.DstMAC == nil)
		if err != nil {
			return nil, err
		}
		if !cfg.Src.IsValid() {
			cfg.Src = src
		}
		if cfg.DstMAC == nil {
			cfg.DstMAC = mac
		}
	}
	if len(cfg.DstMAC) != 6 {
		return nil, fmt.Errorf("gen: blast: destination MAC %v is not Ethernet", cfg.DstMAC)
	}
	spec := FrameSpec{Src: cfg.Src, Dst: cfg.Dst, BasePort: cfg.BasePort, DstPort: cfg.DstPort, Size: cfg.Size, Flows: cfg.Flows}
	copy(spec.SrcMAC[:], ifc.HardwareAddr)
	copy(spec.DstMAC[:], cfg.DstMAC)
	fb, err := NewFrameBuilder(spec)
	if err != nil {
		return nil, err
	}
	b := &Blaster{cfg: cfg, fb: fb, bypass: true}
	for t := range cfg.Threads {
		fd, bypass, err := openTX(ifc.Index)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.bypass = b.bypass && bypass
		lo, hi := t*cfg.Flows/cfg.Threads, (t+1)*cfg.Flows/cfg.Threads
		b.senders = append(b.senders, newSender(fb, fd, uint32(lo), uint32(hi)))
	}
	return b, nil
}

// newSender sets up the batch buffers around an open socket fd, for flows
// lo..hi-1.
func newSender(fb *FrameBuilder, fd int, lo, hi uint32) *sender {
	s := &sender{fd: fd, fb: fb, lo: lo, hi: hi, cur: lo,
		bufs: make([][]byte, blastBatch),
		iovs: make([]unix.Iovec, blastBatch),
		msgs: make([]unix.Mmsghdr, blastBatch),
	}
	size := fb.Spec().Size
	for i := range blastBatch {
		s.bufs[i] = make([]byte, size)
		fb.Build(s.bufs[i], lo, 0)
		s.iovs[i].Base = &s.bufs[i][0]
		s.iovs[i].SetLen(size)
		s.msgs[i].Hdr.Iov = &s.iovs[i]
		s.msgs[i].Hdr.SetIovlen(1)
	}
	return s
}

// openTX opens a send-only AF_PACKET socket bound to device ifindex
// (protocol 0: it receives nothing).
func openTX(ifindex int) (fd int, bypass bool, err error) {
	fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, false, fmt.Errorf("gen: blast: AF_PACKET socket: %w", err)
	}
	bypass = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1) == nil
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, false, fmt.Errorf("gen: blast: bind: %w", err)
	}
	return fd, bypass, nil
}

// Spec returns the frames' spec (addresses resolved).
func (b *Blaster) Spec() FrameSpec { return b.fb.Spec() }

// Close closes the sockets.
func (b *Blaster) Close() error {
	var errs []error
	for _, s := range b.senders {
		errs = append(errs, unix.Close(s.fd))
	}
	return errors.Join(errs...)
}

// Run sends for the configured duration, or until ctx is done, on every
// thread at once, and returns the totals.
func (b *Blaster) Run(ctx context.Context) (BlastResult, error) {
	res := BlastResult{Size: b.cfg.Size, Flows: b.cfg.Flows, Rate: b.cfg.Rate, Threads: len(b.senders), QdiscBypass: b.bypass}
	type out struct {
		frames, dropped uint64
		err             error
	}
	outs := make([]out, len(b.senders))
	start := time.Now()
	end := start.Add(b.cfg.Duration)
	var wg sync.WaitGroup
	for i, s := range b.senders {
		// Thread i's share of the rate: flows are split as evenly.
		rate := float64(b.cfg.Rate) * float64(s.hi-s.lo) / float64(b.cfg.Flows)
		wg.Go(func() { outs[i].frames, outs[i].dropped, outs[i].err = s.run(ctx, rate, start, end) })
	}
	wg.Wait()
	res.Duration = time.Since(start)
	var errs []error
	for _, o := range outs {
		res.Frames += o.frames
		res.Dropped += o.dropped
		if o.err != nil {
			errs = append(errs, o.err)
		}
	}
	res.Bytes = res.Frames * uint64(b.cfg.Size)
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("gen: blast on %s: %w", b.cfg.Dev, err)
	}
	return res, nil
}

// run is one thread's send loop: rate frames per second (0: flat out)
// from start until end or ctx is done.
func (s *sender) run(ctx context.Context, rate float64, start, end time.Time) (frames, dropped uint64, err error) {
	// A batch goes out when a millisecond's worth of frames is due (1 to
	// blastBatch frames). The bucket holds 4 batches or 10 ms of frames,
	// whichever is more, so that sleeping a little too long costs no rate
	// while a sender that was starved for long does not burst.
	want := min(max(rate/1000, 1), blastBatch)
	burst := max(4*want, rate/100)
	tokens := 0.0
	last := start
	for {
		now := time.Now()
		if !now.Before(end) || ctx.Err() != nil {
			break
		}
		n := blastBatch
		if rate > 0 {
			tokens = min(tokens+now.Sub(last).Seconds()*rate, burst)
			last = now
			if tokens < want {
				time.Sleep(time.Duration((want - tokens) / rate * float64(time.Second)))
				continue
			}
			n = min(int(tokens), blastBatch)
			tokens -= float64(n)
		}
		sent, refused, err := s.sendBatch(n)
		frames += uint64(sent)
		dropped += uint64(refused)
		if err != nil {
			return frames, dropped, err
		}
	}
	return frames, dropped, nil
}

// sendBatch patches and sends the next n (≤ blastBatch) frames. It returns
// how many the device accepted and refused; err is for anything but a
// full device.
func (s *sender) sendBatch(n int) (sent, dropped int, err error) {
	for i := range n {
		s.fb.Patch(s.bufs[i], s.cur, s.seq)
		s.seq++
		if s.cur++; s.cur == s.hi {
			s.cur = s.lo
		}
	}
	for i := 0; i < n; {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.msgs[i])), uintptr(n-i), 0, 0, 0)
		switch {
		case e == 0 && r > 0:
			sent += int(r)
			i += int(r)
		case e == 0:
			dropped++ // sent nothing, said nothing: do not spin
			i++
		case e == unix.ENOBUFS || e == unix.EAGAIN:
			// The device (or, with the qdisc, its queue) is full:
			// that frame is lost to the dataplane.
			dropped++
			i++
		case e == unix.EINTR:
		default:
			return sent, dropped, e
		}
	}
	return sent, dropped, nil
}
