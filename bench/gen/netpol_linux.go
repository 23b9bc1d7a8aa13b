package gen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// The NetworkPolicy truth tables' server and prober (gvs-bench
// netpol-serve, netpol-probe), in the manner of the upstream suite's agnhost:
// every pod serves TCP, UDP and SCTP on the same ports, and a prober in a
// pod tries every target at once.

// NetpolServe serves ports until ctx is done: TCP (accepts, writes "ok",
// closes), UDP (echoes each datagram) and SCTP (answers INITs; raw socket,
// see SCTPRespond).
func NetpolServe(ctx context.Context, ports []uint16) error {
	if len(ports) == 0 {
		return errors.New("gen: netpol-serve needs ports")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2*len(ports)+1)
	var wg sync.WaitGroup
	for _, p := range ports {
		l, err := net.Listen("tcp4", fmt.Sprintf(":%d", p))
		if err != nil {
			return fmt.Errorf("gen: netpol-serve: %w", err)
		}
		context.AfterFunc(ctx, func() { l.Close() })
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					if ctx.Err() == nil {
						errc <- err
					}
					return
				}
				_, _ = c.Write([]byte("ok"))
				c.Close()
			}
		})
		u, err := net.ListenUDP("udp4", &net.UDPAddr{Port: int(p)})
		if err != nil {
			return fmt.Errorf("gen: netpol-serve: %w", err)
		}
		wg.Go(func() {
			if err := Echo(ctx, u); err != nil && ctx.Err() == nil {
				errc <- err
			}
		})
	}
	wg.Go(func() {
		if err := SCTPRespond(ctx, ports...); err != nil && ctx.Err() == nil {
			errc <- err
		}
	})
	select {
	case <-ctx.Done():
		wg.Wait()
		return nil
	case err := <-errc:
		cancel()
		wg.Wait()
		return fmt.Errorf("gen: netpol-serve: %w", err)
	}
}

// NetpolProbe tries every target at once and reports which answered: a
// TCP connection established, a UDP datagram echoed, an SCTP INIT
// answered. UDP and SCTP send up to tries requests, each waiting timeout;
// TCP waits tries×timeout for its handshake (the kernel retransmits the
// SYN meanwhile).
func NetpolProbe(ctx context.Context, targets []NetpolTarget, timeout time.Duration, tries int) []bool {
	out := make([]bool, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() { out[i] = probeOne(ctx, t, timeout, max(tries, 1)) })
	}
	wg.Wait()
	return out
}

func probeOne(ctx context.Context, t NetpolTarget, timeout time.Duration, tries int) bool {
	switch t.Proto {
	case "tcp":
		d := net.Dialer{Timeout: timeout * time.Duration(tries)}
		c, err := d.DialContext(ctx, "tcp4", t.Addr.String())
		if err != nil {
			return false
		}
		c.Close()
		return true
	case "udp":
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(t.Addr))
		if err != nil {
			return false
		}
		defer c.Close()
		buf := make([]byte, 64)
		for range tries {
			if _, err := c.Write([]byte("netpol-probe")); err != nil {
				return false
			}
			_ = c.SetReadDeadline(time.Now().Add(timeout))
			if n, err := c.Read(buf); err == nil && string(buf[:n]) == "netpol-probe" {
				return true
			}
		}
		return false
	case "sctp":
		r, err := SCTPProbe(ctx, t.Addr, tries, timeout)
		return err == nil && r.Answered > 0
	}
	return false
}
