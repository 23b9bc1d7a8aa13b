package daemon

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/gvswitch/gvs/internal/handoff"
)

// liveUpgrade is the daemon's side of a live upgrade (handoff.go): taking
// a running daemon's descriptors over at start, and handing its own to a
// successor. It works on the dataplane's switch and ports and the node's
// pods, which it embeds.
type liveUpgrade struct {
	cfg *Config
	log *slog.Logger
	*dataplane
	*nodeState

	// inherit is what the predecessor handed over, until used (nil
	// without one; tookOver stays set); handedOff is set once this daemon
	// handed everything to a successor; listeners are the CNI and
	// control sockets, pausable.
	inherit   *inheritance
	tookOver  bool
	handedOff atomic.Bool
	handingMu sync.Mutex // held while handing over
	// released is set when a successor asked this daemon to stop
	// (handoff fallback); releaseConn is that successor's connection,
	// left open until the process exits. noSave: do not save the
	// connection table on exit.
	released    atomic.Bool
	releaseConn *handoff.Conn
	noSave      bool
	listeners   struct{ cni, control *pausableListener }
}
