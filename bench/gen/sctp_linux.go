package gen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"time"
)

// SCTPRespond answers every SCTP INIT to one of ports with an INIT ACK,
// over a raw IP socket, until ctx is done. It works without the kernel's
// SCTP (whose absence leaves the INIT to raw sockets).
func SCTPRespond(ctx context.Context, ports ...uint16) error {
	conn, err := net.ListenIP("ip4:sctp", nil)
	if err != nil {
		return fmt.Errorf("gen: sctp responder: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 65536)
	for {
		n, from, err := conn.ReadFromIP(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("gen: sctp responder: %w", err)
		}
		p, err := ParseSCTP(buf[:n])
		if err != nil || p.Chunk != SCTPChunkInit || !slices.Contains(ports, p.DstPort) {
			continue
		}
		ack := BuildSCTPInit(p.DstPort, p.SrcPort, p.InitiateTag, rand.Uint32()|1, true)
		_, _ = conn.WriteToIP(ack, from)
	}
}

// SCTPResult is what SCTPProbe saw.
type SCTPResult struct {
	Sent     int `json:"sent"`
	Answered int `json:"answered"`
}

// SCTPProbe sends count INITs to addr, each from a fresh source port with a
// fresh initiate tag, and counts the INIT ACKs that come back from addr
// for them within timeout each.
func SCTPProbe(ctx context.Context, addr netip.AddrPort, count int, timeout time.Duration) (SCTPResult, error) {
	var r SCTPResult
	if count <= 0 {
		return r, errors.New("gen: sctp probe count must be positive")
	}
	conn, err := net.ListenIP("ip4:sctp", nil)
	if err != nil {
		return r, fmt.Errorf("gen: sctp probe: %w", err)
	}
	defer conn.Close()
	dst := &net.IPAddr{IP: addr.Addr().AsSlice()}
	buf := make([]byte, 65536)
	base := uint16(32768 + rand.IntN(16384))
	for i := range count {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		src, tag := base+uint16(i), rand.Uint32()|1
		if _, err := conn.WriteToIP(BuildSCTPInit(src, addr.Port(), 0, tag, false), dst); err != nil {
			return r, fmt.Errorf("gen: sctp probe: %w", err)
		}
		r.Sent++
		deadline := time.Now().Add(timeout)
		_ = conn.SetReadDeadline(deadline)
		for time.Now().Before(deadline) {
			n, from, err := conn.ReadFromIP(buf)
			if err != nil {
				break // the deadline: this probe is lost
			}
			p, err := ParseSCTP(buf[:n])
			if err != nil || !from.IP.Equal(dst.IP) || p.Chunk != SCTPChunkInitAck ||
				p.SrcPort != addr.Port() || p.DstPort != src || p.VTag != tag {
				continue
			}
			r.Answered++
			break
		}
	}
	return r, nil
}
