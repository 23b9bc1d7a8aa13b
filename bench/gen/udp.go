// Package gen holds gvs-bench's packet generators: a many-flow UDP
// generator on sockets with a counting sink, a UDP latency prober with its
// echo server, and a frame blaster that writes raw Ethernet/IPv4/UDP frames
// to an interface with AF_PACKET (Blaster, FrameBuilder) with a receiver
// that counts them per flow (Receiver). They run inside pod namespaces
// (gvs-bench's udp-* and blast* subcommands) and report JSON, which
// `gvs-bench compare` collects.
package gen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// Packet sizes the generator accepts: UDP payload bytes plus the 42 bytes
// of Ethernet, IPv4 and UDP headers make the frame size.
const (
	MinFrame    = 64
	MaxFrame    = 9000
	frameHeader = 14 + 20 + 8
	batch       = 64
)

// ErrFrameSize is returned for a frame size outside MinFrame..MaxFrame.
var ErrFrameSize = errors.New("gen: frame size out of range")

// FlowConfig configures Send.
type FlowConfig struct {
	// Addr is the sink, host:port.
	Addr string
	// Frame is the Ethernet frame size, MinFrame..MaxFrame.
	Frame int
	// Flows is the number of flows (distinct UDP source ports), default 1.
	Flows int
	// Rate is the total packets per second, 0 for as fast as possible.
	Rate int
	// Duration is how long to send.
	Duration time.Duration
	// GSO, when above 1, sends GSO datagrams per system call as one UDP
	// GSO message (UDP_SEGMENT; the kernel, or a device with USO, cuts
	// it), like QUIC stacks do; at most MaxGSO, and only with Rate 0.
	GSO int
}

// MaxGSO is the most datagrams of one UDP GSO message (UDP_MAX_SEGMENTS
// of older kernels).
const MaxGSO = 64

// SendResult is what Send sent.
type SendResult struct {
	Packets  uint64        `json:"packets"`
	Bytes    uint64        `json:"bytes"`
	Duration time.Duration `json:"duration"`
	// Errors counts failed sends (e.g. ENOBUFS).
	Errors uint64 `json:"errors"`
}

// PPS returns the packets sent per second.
func (r SendResult) PPS() float64 { return perSecond(r.Packets, r.Duration) }

// Send sends UDP datagrams of cfg.Frame bytes on the wire from cfg.Flows
// sockets, round robin in batches of 64 (sendmmsg), for cfg.Duration. Each
// datagram carries its flow number and a sequence number.
func Send(ctx context.Context, cfg FlowConfig) (SendResult, error) {
	if cfg.Frame < MinFrame || cfg.Frame > MaxFrame {
		return SendResult{}, fmt.Errorf("%w: %d", ErrFrameSize, cfg.Frame)
	}
	gso := max(cfg.GSO, 1)
	if gso > MaxGSO || (gso > 1 && cfg.Rate > 0) {
		return SendResult{}, fmt.Errorf("gen: GSO %d: 0…%d datagrams per send, without a rate", cfg.GSO, MaxGSO)
	}
	flows := max(cfg.Flows, 1)
	conns := make([]*ipv4.PacketConn, 0, flows)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flows {
		c, err := net.Dial("udp4", cfg.Addr)
		if err != nil {
			return SendResult{}, fmt.Errorf("gen: %w", err)
		}
		conns = append(conns, ipv4.NewPacketConn(c.(*net.UDPConn)))
		if gso > 1 {
			if err := setUDPSegment(c.(*net.UDPConn), cfg.Frame-frameHeader); err != nil {
				return SendResult{}, err
			}
		}
	}
	size := cfg.Frame - frameHeader
	// A message is gso datagrams back to back; a batch about 64 datagrams.
	msgs := make([]ipv4.Message, max(batch/gso, 1))
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, size*gso)}
	}
	var res SendResult
	start := time.Now()
	end := start.Add(cfg.Duration)
	var seq uint64
	for flow := 0; ; flow = (flow + 1) % flows {
		now := time.Now()
		if now.After(end) || ctx.Err() != nil {
			break
		}
		n := len(msgs)
		if cfg.Rate > 0 {
			due := uint64(now.Sub(start).Seconds() * float64(cfg.Rate))
			if due <= res.Packets {
				time.Sleep(time.Duration(float64(time.Second) * float64(batch) / float64(cfg.Rate) / 4))
				continue
			}
			n = int(min(due-res.Packets, batch))
		}
		for i := range n {
			for k := range gso {
				if b := msgs[i].Buffers[0][k*size : (k+1)*size]; len(b) >= 12 {
					binary.BigEndian.PutUint32(b, uint32(flow))
					binary.BigEndian.PutUint64(b[4:], seq+uint64(i*gso+k))
				}
			}
		}
		sent, err := conns[flow].WriteBatch(msgs[:n], 0)
		if err != nil {
			res.Errors++
		}
		if sent > 0 {
			seq += uint64(sent * gso)
			res.Packets += uint64(sent * gso)
			res.Bytes += uint64(sent * gso * cfg.Frame)
		}
	}
	res.Duration = time.Since(start)
	return res, nil
}

// SinkResult is what Sink received.
type SinkResult struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Active is the time from the first to the last packet received.
	Active time.Duration `json:"active"`
}

// Sink counts the datagrams arriving on conn (recvmmsg, 64 at a time)
// until ctx is done, then returns the totals. Bytes count frame bytes on
// the wire (payload + 42).
func Sink(ctx context.Context, conn *net.UDPConn) (SinkResult, error) {
	_ = conn.SetReadBuffer(8 << 20)
	pc := ipv4.NewPacketConn(conn)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 65536)}
	}
	var res SinkResult
	var first, last time.Time
	for {
		n, err := pc.ReadBatch(msgs, 0)
		if n > 0 {
			last = time.Now()
			if first.IsZero() {
				first = last
			}
			res.Packets += uint64(n)
			for i := range n {
				res.Bytes += uint64(msgs[i].N + frameHeader)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return res, fmt.Errorf("gen: sink: %w", err)
		}
	}
	res.Active = last.Sub(first)
	return res, nil
}

func perSecond(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// setUDPSegment sets UDP_SEGMENT (the GSO datagram size) on c.
func setUDPSegment(c *net.UDPConn, size int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, size)
	}); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("gen: UDP_SEGMENT: %w", serr)
	}
	return nil
}
