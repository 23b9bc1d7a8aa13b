package daemon

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn/why"
)

// serveTrace serves the node's read-only trace endpoint (sdn/why: "trace"
// and "pods" over mutual TLS, for administrators and gvs-master) on addr
// until ctx ends. The endpoint is an operator's tool, not part of
// forwarding: when it cannot serve (a node certificate without server
// usage, the address taken), it says so in the log and the daemon runs on.
func (d *Daemon) serveTrace(ctx context.Context, addr string) {
	cfg, err := why.ServerConfig(d.cfg.EtcdTLS, d.log)
	if err != nil {
		d.log.Warn("trace endpoint: not serving", "addr", addr, "err", err)
		return
	}
	var l net.Listener
	for tries := 0; ; tries++ {
		l, err = why.Listen(addr, cfg)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || tries >= 250 || ctx.Err() != nil {
			break
		}
		// A live upgrade: the old daemon holds the address until it has
		// exited, a moment after the handoff (handoff.go).
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		d.log.Warn("trace endpoint: not serving", "addr", addr, "err", err)
		return
	}
	d.log.Info("trace endpoint: serving", "addr", addr)
	if err := control.Serve(ctx, l, why.Handler(d.handle), d.log); err != nil {
		d.log.Warn("trace endpoint: stopped", "addr", addr, "err", err)
	}
}
