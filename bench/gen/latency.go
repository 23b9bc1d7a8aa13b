package gen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

// probeSize is the UDP payload of a probe: a magic word and a sequence
// number.
const probeSize = 16

const probeMagic = 0x67767370 // "gvsp"

// Echo answers every datagram on conn with the same bytes until ctx is
// done.
func Echo(ctx context.Context, conn *net.UDPConn) error {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 65536)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("gen: echo: %w", err)
		}
		_, _ = conn.WriteToUDPAddrPort(buf[:n], from)
	}
}

// ProbeConfig configures Probe.
type ProbeConfig struct {
	// Addr is the echo server, host:port.
	Addr string
	// Count probes are sent, Interval apart.
	Count    int
	Interval time.Duration
	// Timeout is how long to wait for the last replies (default 1 s).
	Timeout time.Duration
}

// LatencyResult holds round-trip times in microseconds.
type LatencyResult struct {
	Sent     int     `json:"sent"`
	Received int     `json:"received"`
	P50us    float64 `json:"p50_us"`
	P90us    float64 `json:"p90_us"`
	P99us    float64 `json:"p99_us"`
	Maxus    float64 `json:"max_us"`
	// Slow counts the replies slower than SlowRTT; SlowFirst and SlowLast
	// are the first and last of their probes' sequence numbers (0..Count-1;
	// -1 without any): whether a tail is spread over the run (a shared
	// queue) or bunched (a stall).
	Slow      int `json:"slow"`
	SlowFirst int `json:"slow_first_seq"`
	SlowLast  int `json:"slow_last_seq"`
}

// SlowRTT is the round trip from which LatencyResult counts a reply as
// slow.
const SlowRTT = 10 * time.Millisecond

// Probe sends cfg.Count UDP probes to an Echo server and measures each
// reply's round trip (monotonic clock); replies after Timeout are lost. A
// probe refused by the destination (ICMP port unreachable: the server not
// up yet) is lost; the replies after it are counted.
func Probe(ctx context.Context, cfg ProbeConfig) (LatencyResult, error) {
	if cfg.Count <= 0 {
		return LatencyResult{}, fmt.Errorf("gen: probe count %d", cfg.Count)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	c, err := net.Dial("udp4", cfg.Addr)
	if err != nil {
		return LatencyResult{}, fmt.Errorf("gen: %w", err)
	}
	conn := c.(*net.UDPConn)
	defer conn.Close()
	sentAt := make([]time.Time, cfg.Count)
	rtts := make([]time.Duration, 0, cfg.Count)
	slow, slowFirst, slowLast := 0, -1, -1
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, err := conn.Read(buf)
			now := time.Now()
			if errors.Is(err, syscall.ECONNREFUSED) {
				// An ICMP port unreachable for a probe sent before the
				// echo server listened (compare starts the server just
				// before the probe): that probe is lost, the replies
				// to come are not.
				continue
			}
			if err != nil {
				return
			}
			if n < probeSize || binary.BigEndian.Uint32(buf) != probeMagic {
				continue
			}
			seq := binary.BigEndian.Uint64(buf[8:])
			mu.Lock()
			if seq < uint64(len(sentAt)) && !sentAt[seq].IsZero() {
				rtt := now.Sub(sentAt[seq])
				rtts = append(rtts, rtt)
				if rtt >= SlowRTT {
					slow++
					if slowFirst < 0 || int(seq) < slowFirst {
						slowFirst = int(seq)
					}
					slowLast = max(slowLast, int(seq))
				}
				sentAt[seq] = time.Time{} // count each reply once
			}
			mu.Unlock()
		}
	})
	pkt := make([]byte, probeSize)
	binary.BigEndian.PutUint32(pkt, probeMagic)
	sent := 0
	tick := time.NewTicker(max(cfg.Interval, time.Microsecond))
	for i := range cfg.Count {
		binary.BigEndian.PutUint64(pkt[8:], uint64(i))
		mu.Lock()
		sentAt[i] = time.Now()
		mu.Unlock()
		if _, err := conn.Write(pkt); err == nil {
			sent++
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		if ctx.Err() != nil {
			break
		}
	}
	tick.Stop()
	select {
	case <-ctx.Done():
	case <-time.After(cfg.Timeout):
	}
	_ = conn.SetReadDeadline(time.Unix(1, 0))
	wg.Wait()
	res := LatencyResult{Sent: sent, Received: len(rtts), Slow: slow, SlowFirst: slowFirst, SlowLast: slowLast}
	if len(rtts) > 0 {
		slices.Sort(rtts)
		res.P50us = us(Percentile(rtts, 50))
		res.P90us = us(Percentile(rtts, 90))
		res.P99us = us(Percentile(rtts, 99))
		res.Maxus = us(rtts[len(rtts)-1])
	}
	return res, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Percentile returns the p-th percentile (nearest rank) of sorted, or 0
// when it is empty.
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[min(max(k, 1), len(sorted))-1]
}
