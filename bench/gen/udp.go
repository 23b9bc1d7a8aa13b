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
}

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
	}
	size := cfg.Frame - frameHeader
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, size)}
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
		n := batch
		if cfg.Rate > 0 {
			due := uint64(now.Sub(start).Seconds() * float64(cfg.Rate))
			if due <= res.Packets {
				time.Sleep(time.Duration(float64(time.Second) * float64(batch) / float64(cfg.Rate) / 4))
				continue
			}
			n = int(min(due-res.Packets, batch))
		}
		for i := range n {
			b := msgs[i].Buffers[0]
			if len(b) >= 12 {
				binary.BigEndian.PutUint32(b, uint32(flow))
				binary.BigEndian.PutUint64(b[4:], seq+uint64(i))
			}
		}
		sent, err := conns[flow].WriteBatch(msgs[:n], 0)
		if err != nil {
			res.Errors++
		}
		if sent > 0 {
			seq += uint64(sent)
			res.Packets += uint64(sent)
			res.Bytes += uint64(sent * cfg.Frame)
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
