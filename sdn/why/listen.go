package why

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"
)

// Bounds of the trace endpoint's listener on clients that have not
// authenticated yet.
const (
	// HandshakeTimeout is how long a client has to complete the TLS
	// handshake (and so to prove its identity).
	HandshakeTimeout = 10 * time.Second
	// MaxHandshakes is how many handshakes may be under way at once; a
	// connection beyond them is closed at once.
	MaxHandshakes = 32
)

// Listen opens a node's trace endpoint on addr with cfg (ServerConfig).
// The listener's Accept returns only connections whose TLS handshake has
// completed, so a client that was refused or that never finishes its
// handshake holds nothing past HandshakeTimeout, and at most
// MaxHandshakes such clients are served at once.
func Listen(addr string, cfg *tls.Config) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("why: trace endpoint: %w", err)
	}
	return NewListener(l, cfg), nil
}

// NewListener is Listen over an open listener (its connections are
// raw; NewListener runs TLS on them). Closing it closes inner.
func NewListener(inner net.Listener, cfg *tls.Config) net.Listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{inner: inner, ready: make(chan net.Conn), cancel: cancel, done: make(chan struct{})}
	go l.run(ctx, cfg)
	return l
}

type listener struct {
	inner  net.Listener
	ready  chan net.Conn
	cancel context.CancelFunc
	done   chan struct{}
	err    error // why run ended; read after done is closed
	once   sync.Once
}

func (l *listener) run(ctx context.Context, cfg *tls.Config) {
	sem := make(chan struct{}, MaxHandshakes)
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		close(l.done)
	}()
	for {
		c, err := l.inner.Accept()
		if err != nil {
			l.err = err
			l.cancel()
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			c.Close() // too many clients mid-handshake
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			tc := tls.Server(c, cfg)
			hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
			err := tc.HandshakeContext(hctx)
			cancel()
			if err != nil {
				tc.Close()
				return
			}
			select {
			case l.ready <- tc:
			case <-ctx.Done():
				tc.Close()
			}
		}()
	}
}

// Accept returns the next connection whose handshake completed.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

// Close stops accepting; connections already returned stay open.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.inner.Close()
	})
	return err
}

// Addr is the inner listener's address.
func (l *listener) Addr() net.Addr { return l.inner.Addr() }
