// Package busypoll is bounded, adaptive busy polling for the readers of a
// switch's ports: how long a reader whose queue has just run dry keeps
// asking it for frames before it goes to sleep.
//
// A reader that sleeps as soon as its queue is empty pays for every frame
// that arrives soon after: the wake-up of its thread (on a VM, often a vCPU
// leaving halt) and, in Go, the scheduler's hand-off of its P. Polling for
// a few microseconds instead catches that frame without the wake-up — but
// takes a CPU the workloads may want, and on a sparse or idle queue it
// catches nothing. So each reader polls within a window of its own that
// follows its queue, by the rule KVM uses for a halted vCPU
// (halt_poll_ns):
//
//  1. A reader with a window polls for at most that long, with a
//     sched_yield between tries so that other threads on the CPU still run.
//  2. When it must sleep anyway, the sleep is timed. A sleep that ended
//     within Config.Max — a longer window would have caught the frame —
//     doubles the window (from 10 µs, up to Max). A longer sleep halves it,
//     and below 10 µs it is 0: an idle or sparse queue does not poll.
//  3. At most Config.Pollers readers poll at once, switch-wide; the others
//     sleep right away. By default that is one fewer than the CPUs, so that
//     with one switch on the machine a CPU is always left to the workloads.
//
// A Poller is shared by a switch's readers; each reader takes a Reader of
// its own. A nil *Poller and a nil *Reader are valid and never poll, so a
// port written with them costs nothing when polling is off.
package busypoll

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// MaxWindow is the longest Config.Max.
const MaxWindow = time.Millisecond

// growStart is the first window of a reader whose sleeps are short, and
// the smallest it keeps (halt_poll_ns_grow_start's default).
const growStart = int64(10 * time.Microsecond)

// Config is a Poller's configuration. The zero value polls nothing.
type Config struct {
	// Max bounds each reader's window: the longest it polls before it
	// sleeps, 0 (off) to MaxWindow.
	Max time.Duration
	// Pollers is how many readers may poll at the same time; 0 means one
	// fewer than runtime.NumCPU(), at least one.
	Pollers int
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.Max < 0 || c.Max > MaxWindow:
		return fmt.Errorf("busypoll: Max %v out of range 0..%v", c.Max, MaxWindow)
	case c.Pollers < 0:
		return errors.New("busypoll: Pollers is negative")
	}
	return nil
}

// Poller holds what a switch's readers share: the bound, how many may poll
// at once, and the counters. Its methods are safe for concurrent use.
type Poller struct {
	max     int64
	limit   int32
	polling atomic.Int32
	polls   atomic.Uint64
	found   atomic.Uint64
	turned  atomic.Uint64
	spent   atomic.Int64
}

// New returns a Poller, or nil (polling off) when cfg.Max is 0.
func New(cfg Config) (*Poller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Max == 0 {
		return nil, nil
	}
	n := cfg.Pollers
	if n == 0 {
		n = max(1, runtime.NumCPU()-1)
	}
	return &Poller{max: int64(cfg.Max), limit: int32(n)}, nil
}

// Max returns the bound of every reader's window (0 for a nil Poller).
func (p *Poller) Max() time.Duration {
	if p == nil {
		return 0
	}
	return time.Duration(p.max)
}

// Pollers returns how many readers may poll at once (0 for a nil Poller).
func (p *Poller) Pollers() int {
	if p == nil {
		return 0
	}
	return int(p.limit)
}

// Reader returns the polling state of one reader, which only that reader
// may use. It is nil for a nil Poller.
func (p *Poller) Reader() *Reader {
	if p == nil {
		return nil
	}
	return &Reader{p: p}
}

// Stats are a Poller's counters since New.
type Stats struct {
	// Polls is how many times a reader polled its empty queue; Found, of
	// those, how many ended with frames (a sleep and wake-up saved).
	Polls, Found uint64
	// Turned is how many times a reader with a window slept without
	// polling because Config.Pollers others were polling.
	Turned uint64
	// Time is the time spent polling, all readers together.
	Time time.Duration
}

// Stats returns the counters (zero for a nil Poller).
func (p *Poller) Stats() Stats {
	if p == nil {
		return Stats{}
	}
	return Stats{Polls: p.polls.Load(), Found: p.found.Load(), Turned: p.turned.Load(),
		Time: time.Duration(p.spent.Load())}
}

// Reader is one reader's window. It is owned by that reader.
type Reader struct {
	p     *Poller
	win   int64 // nanoseconds; 0: sleep at once
	since int64 // when the current sleep began
}

// epoch is the origin of now.
var epoch = time.Now()

// now is the time in nanoseconds since epoch; a variable so that a test
// can give Poll a clock that the machine's load cannot stop.
var now = func() int64 { return int64(time.Since(epoch)) }

// Window returns the reader's current window (0 for a nil Reader).
func (r *Reader) Window() time.Duration {
	if r == nil {
		return 0
	}
	return time.Duration(r.win)
}

// Poll calls try, which looks for frames without waiting and reports
// whether it found any (or anything else the reader must act on), until
// it does or the reader's window has passed. It returns try's last
// answer; false means the reader should sleep, between Sleep and Woke. It
// does not call try at all when the window is 0, or when the Poller's
// readers are all polling already.
func (r *Reader) Poll(try func() bool) bool {
	if r == nil || r.win == 0 {
		return false
	}
	p := r.p
	if p.polling.Add(1) > p.limit {
		p.polling.Add(-1)
		p.turned.Add(1)
		return false
	}
	p.polls.Add(1)
	start := now()
	end := start + r.win
	found := false
	t := start
	for {
		if found = try(); found {
			t = now()
			break
		}
		if t = now(); t >= end {
			break
		}
		yield()
	}
	p.polling.Add(-1)
	p.spent.Add(t - start)
	if found {
		p.found.Add(1)
	}
	return found
}

// Sleep marks the start of the reader's sleep, which Woke ends.
func (r *Reader) Sleep() {
	if r != nil {
		r.since = now()
	}
}

// Woke ends the sleep Sleep began and adapts the window to its length: a
// sleep that ended within the Poller's bound grows the window, a longer
// one shrinks it.
func (r *Reader) Woke() {
	if r != nil {
		r.adapt(now() - r.since)
	}
}

// adapt is Woke for a sleep of d nanoseconds.
func (r *Reader) adapt(d int64) {
	bound := r.p.max
	switch {
	case d > bound:
		if r.win /= 2; r.win < growStart {
			r.win = 0
		}
	case r.win < bound:
		r.win = min(bound, max(r.win*2, growStart))
	}
}
