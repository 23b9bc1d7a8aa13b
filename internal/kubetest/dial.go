package kubetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// DialIn returns a dial function (for rest.Config.Dial) whose sockets are
// created in the network namespace bind-mounted at nsPath: a socket stays
// in the namespace it was made in, so the rest of the process, in its own
// namespace, talks to servers that exist only in the lab.
func DialIn(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			// The goroutine's thread enters the namespace and is thrown
			// away afterwards (never unlocked), so no other goroutine ever
			// runs in the wrong namespace.
			runtime.LockOSThread()
			f, err := os.Open(nsPath)
			if err != nil {
				ch <- result{nil, fmt.Errorf("kubetest: dial in %s: %w", nsPath, err)}
				return
			}
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
			if err != nil {
				ch <- result{nil, fmt.Errorf("kubetest: enter %s: %w", nsPath, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}
