package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/why"
)

// traceCertRetry is how often serveTrace checks again a node certificate
// it cannot serve with.
const traceCertRetry = time.Minute

// serveTrace serves the node's read-only trace endpoint (sdn/why: "trace"
// and "pods" over mutual TLS, for administrators and gvs-master) on addr
// until ctx ends, with the node's certificate files and the daemon's
// control handler h (of which why.Handler lets only those two commands
// through). It is a function, not a Daemon method, to keep the Daemon
// small (internal/importcheck). The endpoint is an operator's tool, not part of
// forwarding: when it cannot serve (a node certificate without server
// usage, the address taken), it says so in the log and the daemon runs on.
// A certificate without server usage is checked again every
// traceCertRetry, so that replacing it (gvs-master cert node) starts the
// endpoint without a restart.
func serveTrace(ctx context.Context, addr string, files pki.Files, h control.Handler, log *slog.Logger) {
	cfg, err := why.ServerConfig(files, log)
	for err != nil {
		log.Warn("trace endpoint: not serving", "addr", addr, "err", err, "retry", traceCertRetry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(traceCertRetry):
		}
		cfg, err = why.ServerConfig(files, log)
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
		log.Warn("trace endpoint: not serving", "addr", addr, "err", err)
		return
	}
	log.Info("trace endpoint: serving", "addr", addr)
	if err := control.Serve(ctx, l, why.Handler(h), log); err != nil {
		log.Warn("trace endpoint: stopped", "addr", addr, "err", err)
	}
}
