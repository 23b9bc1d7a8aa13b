package vswitch

import (
	"sync/atomic"
	"time"
)

// rateLimit lets one event through per interval; it is how the data path
// logs (at most once a second), never once per packet.
type rateLimit struct {
	last atomic.Int64 // unix nanoseconds of the last event let through
}

func (r *rateLimit) allow(now time.Time, every time.Duration) bool {
	last := r.last.Load()
	if now.UnixNano()-last < int64(every) {
		return false
	}
	return r.last.CompareAndSwap(last, now.UnixNano())
}

func (s *Switch) txErrorLog(e *portEntry, err error) {
	if s.txErrLog.allow(time.Now(), time.Second) {
		s.log.Warn("port write failed (logged at most once a second)", "port", e.no, "name", e.name(), "err", err)
	}
}
