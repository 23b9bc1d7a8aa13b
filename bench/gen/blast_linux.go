package gen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The frame blaster, one batch at a time:
//
//  1. Refill the token bucket (rate > 0) and take up to blastBatch tokens,
//     sleeping until a whole batch is due when the bucket is short.
//  2. Patch the next n frames in the batch's own buffers (source port,
//     flow, sequence number, UDP checksum): flows go round robin.
//  3. sendmmsg them on an AF_PACKET socket bound to the device, with
//     PACKET_QDISC_BYPASS so they go straight to the driver. A frame the
//     device refuses (ENOBUFS: its queue or the peer's backlog is full) is
//     counted as dropped and skipped, never retried: it was offered.
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
// everything in the calling thread's network namespace; the socket stays in
// that namespace, so Run may be called from anywhere. A Blaster is not safe
// for concurrent use.
type Blaster struct {
	cfg    BlastConfig
	fb     *FrameBuilder
	fd     int
	bypass bool
	bufs   [][]byte
	iovs   []unix.Iovec
	msgs   []unix.Mmsghdr
	flow   uint32
	seq    uint64
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
	fd, bypass, err := openTX(ifc.Index)
	if err != nil {
		return nil, err
	}
	b := newBlaster(cfg, fb, fd)
	b.bypass = bypass
	return b, nil
}

// newBlaster sets up the batch buffers around an open socket fd.
func newBlaster(cfg BlastConfig, fb *FrameBuilder, fd int) *Blaster {
	b := &Blaster{cfg: cfg, fb: fb, fd: fd,
		bufs: make([][]byte, blastBatch),
		iovs: make([]unix.Iovec, blastBatch),
		msgs: make([]unix.Mmsghdr, blastBatch),
	}
	size := fb.Spec().Size
	for i := range blastBatch {
		b.bufs[i] = make([]byte, size)
		fb.Build(b.bufs[i], 0, 0)
		b.iovs[i].Base = &b.bufs[i][0]
		b.iovs[i].SetLen(size)
		b.msgs[i].Hdr.Iov = &b.iovs[i]
		b.msgs[i].Hdr.SetIovlen(1)
	}
	return b
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

// Close closes the socket.
func (b *Blaster) Close() error { return unix.Close(b.fd) }

// Run sends for the configured duration, or until ctx is done.
func (b *Blaster) Run(ctx context.Context) (BlastResult, error) {
	res := BlastResult{Size: b.cfg.Size, Flows: b.cfg.Flows, Rate: b.cfg.Rate, QdiscBypass: b.bypass}
	rate := float64(b.cfg.Rate)
	// The bucket holds up to 10 ms of frames (at least a batch) so that
	// sleeping a little too long costs no rate.
	burst := max(float64(blastBatch), rate/100)
	tokens := 0.0
	start := time.Now()
	last := start
	end := start.Add(b.cfg.Duration)
	for {
		now := time.Now()
		if !now.Before(end) || ctx.Err() != nil {
			break
		}
		n := blastBatch
		if rate > 0 {
			tokens = min(tokens+now.Sub(last).Seconds()*rate, burst)
			last = now
			want := min(float64(blastBatch), burst)
			if tokens < want {
				time.Sleep(time.Duration((want - tokens) / rate * float64(time.Second)))
				continue
			}
			n = min(int(tokens), blastBatch)
			tokens -= float64(n)
		}
		sent, dropped, err := b.sendBatch(n)
		res.Frames += uint64(sent)
		res.Dropped += uint64(dropped)
		if err != nil {
			res.Duration = time.Since(start)
			res.Bytes = res.Frames * uint64(b.cfg.Size)
			return res, fmt.Errorf("gen: blast on %s: %w", b.cfg.Dev, err)
		}
	}
	res.Duration = time.Since(start)
	res.Bytes = res.Frames * uint64(b.cfg.Size)
	return res, nil
}

// sendBatch patches and sends the next n (≤ blastBatch) frames. It returns
// how many the device accepted and refused; err is for anything but a
// full device.
func (b *Blaster) sendBatch(n int) (sent, dropped int, err error) {
	flows := uint32(b.cfg.Flows)
	for i := range n {
		b.fb.Patch(b.bufs[i], b.flow, b.seq)
		b.seq++
		if b.flow++; b.flow == flows {
			b.flow = 0
		}
	}
	for i := 0; i < n; {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(b.fd), uintptr(unsafe.Pointer(&b.msgs[i])), uintptr(n-i), 0, 0, 0)
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
