package gen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ConnServe answers every connection on l with one byte and closes it
// (the server closes first, so the client's side keeps no TIME_WAIT and
// its ports last), until ctx is done.
func ConnServe(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("gen: conn server: %w", err)
		}
		go func() {
			_, _ = c.Write([]byte{1})
			c.Close()
		}()
	}
}

// ConnRateResult is what ConnRate measured.
type ConnRateResult struct {
	Conns   int     `json:"conns"`  // connections that got their byte
	Failed  int     `json:"failed"` // connections that failed or timed out
	PerSec  float64 `json:"per_sec"`
	Seconds float64 `json:"seconds"`
}

// ConnRate opens short connections to a ConnServe server at addr for d,
// from workers goroutines each opening one at a time: connect, read the
// server's byte and its close, close. It measures new connections per
// second through whatever tracks them on the way.
func ConnRate(ctx context.Context, addr string, d time.Duration, workers int) (ConnRateResult, error) {
	var r ConnRateResult
	if workers <= 0 || d <= 0 {
		return r, errors.New("gen: conn rate needs workers and a duration")
	}
	var ok, failed atomic.Int64
	deadline := time.Now().Add(d)
	dialer := net.Dialer{Timeout: time.Second}
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			buf := make([]byte, 8)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				c, err := dialer.DialContext(ctx, "tcp", addr)
				if err != nil {
					failed.Add(1)
					continue
				}
				_ = c.SetDeadline(time.Now().Add(time.Second))
				n, err := io.ReadFull(c, buf[:1])
				if n == 1 {
					_, err = c.Read(buf) // the server's close
				}
				c.Close()
				if n == 1 && errors.Is(err, io.EOF) {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	r.Conns, r.Failed, r.Seconds = int(ok.Load()), int(failed.Load()), el
	if el > 0 {
		r.PerSec = float64(r.Conns) / el
	}
	if r.Conns == 0 {
		return r, fmt.Errorf("gen: conn rate: no connection to %s succeeded (%d failed)", addr, r.Failed)
	}
	return r, nil
}
