package vswitch

import (
	"sync/atomic"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/port"
)

// Idle trimming (Config.TrimIdle). A worker's frame buffers are written by
// its queue's Read and read by the outputs it calls, both on the worker's
// goroutine, so only the worker may give their pages back: the trimmer
// finds workers idle for TrimIdle whose buffers hold more than a page or
// two, or whose queue holds resources of its own (Holder), and wakes them
// (Waker); a woken worker releases its buffers (release; port.ReleasePages)
// and reads on, the queue having given up its own.

// Waker is an optional interface of a port queue whose blocked Read can be
// woken: Wake makes the Read in progress, or the next, return
// port.ErrWoken without frames. tap.Device implements it.
type Waker interface {
	Wake()
}

// Holder is an optional interface of a port queue that holds resources of
// its own while it is busy (package tap/uring: io_uring rings and the OS
// thread its reader is locked to) and gives them up when its reader is
// woken idle (Waker). While Holds reports true, the trimmer wakes the
// queue's idle worker even when the worker's buffers are clean.
type Holder interface {
	Holds() bool
}

// smallFrame is the largest frame a batch of one may carry without making
// its worker's buffers worth trimming: it touches one page of one buffer.
const smallFrame = 2048

// trimmer is the switch's idle-trimming state.
type trimmer struct {
	stop chan struct{} // closed by Close; nil without trimming
	// now is the trimmer's clock (Unix nanoseconds at its last tick):
	// workers stamp their batches with it instead of reading the time.
	now atomic.Int64
	// Releases counts the workers' releases.
	releases atomic.Uint64
}

// trimIdle wakes the workers idle for idle whose buffers are dirty, every
// idle/4, until Close; for idle/4 while Config.Budget refused buffers
// since the last tick.
func (s *Switch) trimIdle(idle time.Duration) {
	defer s.wg.Done()
	tick := time.NewTicker(max(idle/4, 10*time.Millisecond))
	defer tick.Stop()
	s.trim.now.Store(time.Now().UnixNano())
	denied := s.cfg.Budget.Denied()
	for {
		select {
		case <-s.trim.stop:
			return
		case t := <-tick.C:
			now := t.UnixNano()
			s.trim.now.Store(now)
			after := int64(idle)
			if d := s.cfg.Budget.Denied(); d != denied {
				denied, after = d, int64(idle/4)
			}
			for _, e := range *s.ports.Load() {
				for i, w := range e.workers {
					if now-w.lastBatch.Load() < after || !w.dirty.Load() && !holds(e.q[i]) {
						continue
					}
					if wk, ok := e.q[i].(Waker); ok {
						wk.Wake()
					}
				}
			}
		}
	}
}

// used records a batch of n frames: its time, and whether it touched more
// than the first page of the first buffer (more than one frame, a large
// one, or a frame a lending port returned in another buffer) or the
// worker's cache has grown.
func (w *worker) used(n int) {
	w.lastBatch.Store(w.s.trim.now.Load())
	if !w.dirty.Load() && (n > 1 || w.meta[0].Size > smallFrame || &w.bufs[0][0] != w.buf0 ||
		w.cache != nil && w.cache.Len() > flowtable.MinCacheSize) {
		w.dirty.Store(true)
	}
}

// release gives the pages of the worker's buffers back to the operating
// system and shrinks its cache; the worker owns them (it is between
// batches).
func (w *worker) release() {
	if !w.dirty.Load() {
		return
	}
	for _, b := range w.bufs {
		port.ReleasePages(b)
	}
	for _, b := range w.spare {
		port.ReleasePages(b)
	}
	if w.cache != nil {
		w.cache.Shrink()
	}
	w.dirty.Store(false)
	w.s.trim.releases.Add(1)
}

// holds reports whether q holds resources it gives up when woken idle.
func holds(q Port) bool {
	h, ok := q.(Holder)
	return ok && h.Holds()
}
