// Package accept holds the accept loop the project's stream servers share
// (the control socket, the CNI socket, gvs-bench's TCP tool).
package accept

import (
	"context"
	"net"
)

// Loop accepts connections on l and hands each to serve in a goroutine of
// its own, until ctx is done, which closes l; it then returns nil. Any
// other accept error ends the loop and is returned as is. serve owns the
// connection and must close it.
func Loop(ctx context.Context, l net.Listener, serve func(net.Conn)) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go serve(c)
	}
}
