package vswitch

// The way of a frame through the switch:
//
//  1. A port's worker reads a batch of frames into buffers it owns, each
//     frame at offset Headroom, with a port.Meta per frame beside it (its
//     size, offload metadata and, from a tunnel, the remote node and VNI).
//  2. For each frame it extracts the header fields once into a
//     flowtable.Fields, with in_port and, for tunnel frames, tun_id/tun_src.
//  3. The worker's exact-match cache answers for flows it has seen under the
//     current flow-table snapshot; otherwise the snapshot's pipeline runs.
//  4. The verdict's outputs are queued per destination queue (a copy is
//     made for every output after the first), each with a port.Meta: the
//     size, the offload metadata, the tunnel destination for a tunnel port,
//     and the flow hash (FlowHash), which picks the queue of a multi-queue
//     port and which the tunnel reuses for its outer source port. Drops
//     are counted by reason and by table.
//  5. At the end of the batch every queued destination is written in one
//     call, so a batch costs one write per destination, not per frame.
//
// Connection tracking (worker.go, conntrack.go): when the batch's snapshot
// has ct actions, the worker reads the tracker's clock and prefetches the
// batch's connections once per batch; a frame whose verdict has ct steps
// (flowtable.CTStep) has them carried out in order: the outputs before a
// step are queued (on copies: the frame may change), the tracker
// processes the IPv4 packet in the frame (NAT rewriting it in place), and
// a ct with table=N recirculates: the pipeline runs again from table N
// with the frozen metadata and the ct_* fields the tracker gave, on the
// frame itself or, when more of the verdict follows, on a copy.
//
// Offloads: a port whose Caps have Offload may hand over super-frames
// (port.Meta.GSO): a TAP with TSO 64 KiB TCP super-frames, the tunnel port
// coalesced ones. The switch runs the pipeline once per super-frame (its
// headers are those of every segment) and passes the metadata to the
// output, which either takes the super-frame whole (a TAP) or segments it
// (vxlan0). A super-frame for a port without Offload is dropped (DropGSO).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/port"
)

// Sentinel errors of switch management.
var (
	ErrPortExists  = errors.New("vswitch: port number in use")
	ErrNoSuchPort  = errors.New("vswitch: no such port")
	ErrClosed      = errors.New("vswitch: switch closed")
	ErrInvalidPort = errors.New("vswitch: invalid port number")
)

// DefaultMaxFrame is the default size of the frame part of every worker
// buffer: a 9000-byte jumbo frame and its Ethernet header fit. Offloads that
// deliver 64 KiB super-frames need Config.MaxFrame = packet.MaxSuperFrame+1
// (the spare byte lets a TAP read detect truncation).
const DefaultMaxFrame = 9216

// Config configures a Switch. The zero value is not usable: Table is required.
type Config struct {
	// Table is the flow table whose snapshots the workers run.
	Table *flowtable.Table
	// CacheSize is the largest number of entries of each worker's
	// exact-match cache (it starts at flowtable.MinCacheSize and grows
	// with its misses; idle trimming shrinks it); 0 means 4096, negative
	// disables the cache.
	CacheSize int
	// MaxFrame is the largest frame a port may deliver; 0 means
	// DefaultMaxFrame. Each worker keeps BatchSize+8 buffers of this size
	// (plus Headroom), in a mapping outside Go's heap on Linux.
	MaxFrame int
	// NoOffload makes the switch treat every port as one without
	// port.Caps.Offload: a super-frame any port reads is dropped
	// (DropGSO).
	NoOffload bool
	// Conntrack is the connection tracker the flow table's ct actions use,
	// one for the switch, shared by every worker. Nil: the switch has
	// none, and a frame whose rules reach a ct action is dropped
	// (DropNoConntrack). The flow table cannot refuse such a rule itself
	// (it does not know the switches that run it, and rules may be loaded
	// before the switch exists), so the switch fails closed per packet
	// and counts it; New logs a warning when the table already has one.
	Conntrack *conntrack.Tracker
	// SweepInterval, with a Conntrack, makes the switch run a goroutine
	// that calls Conntrack.Sweep every SweepInterval with a budget of
	// Cap()/64 slots (the whole table every 64 intervals: a minute at one
	// second), until Close. Zero: the switch sweeps nothing and the
	// embedder calls Sweep itself (conntrack.Tracker.Sweep); expired
	// entries are invisible either way, sweeping only frees their slots.
	SweepInterval time.Duration
	// TrimIdle, if positive, gives an idle queue's frame buffers back to
	// the operating system: a worker whose queue has carried nothing for
	// TrimIdle after it filled more than its first buffer (a burst, a
	// super-frame) is woken (the queue's Wake method: Waker) and releases
	// its buffers' pages (madvise MADV_DONTNEED on Linux; elsewhere
	// nothing), which fault back in, zeroed, when frames come again. Each
	// worker keeps BatchSize+8 buffers of MaxFrame bytes, 4.7 MB with
	// offloads, resident once super-frames have passed: without it a node
	// whose pods have all carried bulk traffic keeps that memory forever.
	TrimIdle time.Duration
	// Budget is the receive-buffer budget the switch's ports share, if
	// they share one (port.Budget; the ports take from it, the switch
	// does not). While it refuses ports more buffers, the trimmer wakes
	// workers idle for a quarter of TrimIdle instead of all of it, so
	// that the pages idle queues hold go to the busy ones sooner.
	Budget *port.Budget
	// Logger receives management events, never per-packet logs. Nil discards.
	Logger *slog.Logger
}

// Validate reports whether the configuration is usable.
func (c *Config) Validate() error {
	if c.Table == nil {
		return errors.New("vswitch: Config.Table is required")
	}
	if c.SweepInterval < 0 {
		return errors.New("vswitch: negative Config.SweepInterval")
	}
	if c.TrimIdle < 0 {
		return errors.New("vswitch: negative Config.TrimIdle")
	}
	return nil
}

// Switch connects ports through a flow table. Ports are added and removed
// at any time; each queue of a port has one worker goroutine that reads
// from it. All methods are safe for concurrent use.
type Switch struct {
	cfg   Config
	log   *slog.Logger
	ports atomic.Pointer[portMap]

	mu     sync.Mutex // serializes port changes
	closed bool
	wg     sync.WaitGroup

	txErrLog   rateLimit
	drops      [NumDropReasons]counter
	tableDrops [256]atomic.Uint64
	lookups    counter
	cacheHits  counter
	recircs    counter
	sweepStop  chan struct{} // closed by Close to end the sweeper, nil without one
	capTotals  captureTotals // capture.go
	trim       trimmer       // trim.go
	slabs      slabs         // the workers' frame buffers (slab.go)
	pause      pauser        // under mu (pause.go)
	pausing    atomic.Bool   // pause.gate != nil, read by the workers
	epoch      time.Time     // the bandwidth limits' clock starts here (limit.go)
}

type portMap map[uint32]*portEntry

// portEntry is one attached port: one or more queues with the same Caps,
// each read by a worker of its own.
type portEntry struct {
	no      uint32
	q       []Port    // queue 0 names the port
	caps    port.Caps // of every queue, Offload cleared by Config.NoOffload
	framer  Framer    // queue 0 as a Framer, or nil (capture.go)
	workers []*worker // one per queue, made before they start
	stats   portCounters
	capture atomic.Pointer[Capture]   // nil unless a capture runs (capture.go)
	limit   atomic.Pointer[portLimit] // nil unless the port has a bandwidth limit (limit.go)
	limitMu sync.Mutex                // serializes limit changes
	stopped bool                      // under limitMu: the port is being removed
	cancel  context.CancelFunc
	done    chan struct{} // closed when every queue's worker has returned
}

func (e *portEntry) name() string { return e.q[0].Name() }

// close closes every queue.
func (e *portEntry) close() error {
	var errs []error
	for _, q := range e.q {
		if err := q.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// New returns a switch with no ports.
func New(cfg Config) (*Switch, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 4096
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Switch{cfg: cfg, log: log, epoch: time.Now()}
	s.ports.Store(&portMap{})
	if cfg.Conntrack == nil && cfg.Table.Snapshot().HasConntrack() {
		log.Warn("the flow table has ct actions but the switch has no connection tracker: their packets are dropped (no_conntrack)")
	}
	if cfg.Conntrack != nil && cfg.SweepInterval > 0 {
		s.sweepStop = make(chan struct{})
		s.wg.Add(1)
		go s.sweep(cfg.Conntrack, cfg.SweepInterval)
	}
	if cfg.TrimIdle > 0 {
		s.trim.stop = make(chan struct{})
		s.wg.Add(1)
		go s.trimIdle(cfg.TrimIdle)
	}
	return s, nil
}

// AddPort attaches p as port number no and starts its worker. What the
// switch does with it follows from p.Caps(): a tunnel port's frames carry
// tun_src and tun_id into the pipeline and leave with tun_dst and tun_id; an
// Offload port exchanges super-frames. The switch owns p from now on and
// closes it when the port is removed.
func (s *Switch) AddPort(no uint32, p Port) error {
	return s.AddPortQueues(no, []Port{p})
}

// AddPortQueues attaches a port with several queues as port number no: the
// queues of a multi-queue TAP (tap.Config.MultiQueue), or the receive
// queues of the tunnel (vxlan.Port.Queues). Each queue gets a worker of its
// own that reads it, so the queues are served in parallel. Frames toward
// the port are spread over the queues by their flow hash (FlowHash): the
// frames of one flow, in either direction, always take the same queue, and
// a multi-queue TAP, which sends a flow's frames to userspace on the queue
// that flow was last written to, hands the replies to the same worker. The
// queues must be distinct and report the same Caps; queue 0 names the
// port. The switch owns every queue and closes each when the port is
// removed.
func (s *Switch) AddPortQueues(no uint32, queues []Port) error {
	if len(queues) == 0 {
		return fmt.Errorf("%w: %d has no queues", ErrInvalidPort, no)
	}
	e := &portEntry{no: no, q: slices.Clone(queues)}
	for i, q := range e.q {
		if q == nil {
			return fmt.Errorf("%w: %d: queue %d is nil", ErrInvalidPort, no, i)
		}
		if c := q.Caps(); i == 0 {
			e.caps = c
		} else if c != e.caps {
			return fmt.Errorf("%w: %d: queue %d has caps %+v, queue 0 %+v", ErrInvalidPort, no, i, c, e.caps)
		}
		if j := slices.Index(e.q[:i], q); j >= 0 {
			return fmt.Errorf("%w: %d: queues %d and %d are the same", ErrInvalidPort, no, j, i)
		}
	}
	if s.cfg.NoOffload {
		e.caps.Offload = false
	}
	e.framer, _ = e.q[0].(Framer)
	if e.framer != nil && e.framer.WireHeaderLen() > MaxWireHeader {
		return fmt.Errorf("%w: %d: outer headers of %d bytes, more than %d", ErrInvalidPort, no, e.framer.WireHeaderLen(), MaxWireHeader)
	}
	return s.add(e)
}

func (s *Switch) add(e *portEntry) error {
	if e.no == flowtable.PortNone || e.no >= flowtable.PortMax {
		return fmt.Errorf("%w: %d", ErrInvalidPort, e.no)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	old := *s.ports.Load()
	if _, ok := old[e.no]; ok {
		return fmt.Errorf("%w: %d (%s)", ErrPortExists, e.no, old[e.no].name())
	}
	next := make(portMap, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[e.no] = e
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan struct{})
	e.workers = make([]*worker, len(e.q))
	for i, q := range e.q {
		e.workers[i] = s.newWorker(e, q)
	}
	s.ports.Store(&next)
	s.wg.Add(1)
	var workers sync.WaitGroup
	workers.Add(len(e.q))
	for i := range e.q {
		go s.worker(ctx, e, i, &workers)
	}
	go func() {
		workers.Wait()
		// Nobody uses the workers' buffers any more: a worker ends only
		// when its queue's Read failed, and a queue that lends them to
		// the kernel (tap/uring) takes them back before that.
		for _, w := range e.workers {
			s.slabs.put(w.slab)
		}
		close(e.done)
		s.wg.Done()
	}()
	s.log.Info("port added", "port", e.no, "name", e.name(), "queues", len(e.q))
	return nil
}

// RemovePort detaches port no, stops its worker and closes the port.
func (s *Switch) RemovePort(no uint32) error {
	s.mu.Lock()
	old := *s.ports.Load()
	e, ok := old[no]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrNoSuchPort, no)
	}
	next := make(portMap, len(old))
	for k, v := range old {
		if k != no {
			next[k] = v
		}
	}
	s.ports.Store(&next)
	s.mu.Unlock()
	err := s.stop(e)
	s.log.Info("port removed", "port", no, "name", e.name())
	return err
}

func (s *Switch) stop(e *portEntry) error {
	e.cancel()
	e.endLimit()     // no more delayed writes to the queues closed next
	err := e.close() // unblocks the worker's Read
	<-e.done
	e.endCapture()
	return err
}

// Close removes every port and waits for the workers to end.
func (s *Switch) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.sweepStop != nil {
		close(s.sweepStop)
	}
	if s.trim.stop != nil {
		close(s.trim.stop)
	}
	old := *s.ports.Load()
	s.ports.Store(&portMap{})
	s.mu.Unlock()
	var errs []error
	for _, e := range old {
		if err := s.stop(e); err != nil {
			errs = append(errs, fmt.Errorf("port %d: %w", e.no, err))
		}
	}
	s.wg.Wait()
	s.slabs.close()
	return errors.Join(errs...)
}

// PortInfo describes one attached port.
type PortInfo struct {
	No     uint32
	Name   string
	Tunnel bool // the port's Caps have Tunnel
	Queues int  // the number of queues, each read by a worker
	Stats  PortStats
	// Limit is the port's bandwidth limit and its counters, nil without
	// one (SetPortLimit).
	Limit *LimitStats
}

// Ports lists the attached ports, in no particular order.
func (s *Switch) Ports() []PortInfo {
	m := *s.ports.Load()
	out := make([]PortInfo, 0, len(m))
	for _, e := range m {
		pi := PortInfo{No: e.no, Name: e.name(), Tunnel: e.caps.Tunnel, Queues: len(e.q), Stats: e.stats.snapshot()}
		if ls, ok := e.limitStats(); ok {
			pi.Limit = &ls
		}
		out = append(out, pi)
	}
	return out
}

// Stats returns the switch-wide counters.
func (s *Switch) Stats() Stats {
	var st Stats
	for i := range s.drops {
		st.Drops[i] = s.drops[i].n.Load()
	}
	for i := range s.tableDrops {
		st.TableDrops[i] = s.tableDrops[i].Load()
	}
	st.Lookups = s.lookups.n.Load()
	st.CacheHits = s.cacheHits.n.Load()
	st.Recirculations = s.recircs.n.Load()
	st.BufferReleases = s.trim.releases.Load()
	return st
}

// Conntrack returns the switch's connection tracker, nil when it has none.
func (s *Switch) Conntrack() *conntrack.Tracker { return s.cfg.Conntrack }

// Table returns the flow table the switch runs.
func (s *Switch) Table() *flowtable.Table { return s.cfg.Table }
