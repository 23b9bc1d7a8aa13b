package vswitch

// The way of a frame through the switch:
//
//  1. A port's worker reads a batch of frames into buffers it owns, each
//     frame at offset Headroom (tunnel frames arrive decapsulated, with the
//     remote node and VNI beside them).
//  2. For each frame it extracts the header fields once into a
//     flowtable.Fields, with in_port and, for tunnel frames, tun_id/tun_src.
//  3. The worker's exact-match cache answers for flows it has seen under the
//     current flow-table snapshot; otherwise the snapshot's pipeline runs.
//  4. The verdict's outputs are queued per destination port (a copy is made
//     for every output after the first); drops are counted by reason and by
//     table.
//  5. At the end of the batch every queued destination is written in one
//     call, so a batch costs one write per destination, not per frame.
//
// Offloads: a port that implements OffloadPort (or OffloadTunnelPort) is
// read and written with a packet.GSO per frame. A TAP with TSO then hands
// over 64 KiB TCP super-frames and the tunnel port hands over coalesced
// ones; the switch runs the pipeline once per super-frame (its headers are
// those of every segment) and passes the metadata to the output, which
// either takes the super-frame whole (a TAP) or segments it (vxlan0). A
// super-frame for a port without the interface is dropped (DropGSO).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/gvswitch/gvs/flowtable"
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
	// CacheSize is the number of entries of each worker's exact-match
	// cache; 0 means 4096, negative disables the cache.
	CacheSize int
	// MaxFrame is the largest frame a port may deliver; 0 means
	// DefaultMaxFrame. Each worker keeps BatchSize+8 buffers of this size.
	MaxFrame int
	// NoOffload makes the switch ignore the OffloadPort and
	// OffloadTunnelPort interfaces of its ports: every frame then goes
	// through Read/Write (ReadTunnel/WriteTunnel) without GSO metadata.
	NoOffload bool
	// Logger receives management events, never per-packet logs. Nil discards.
	Logger *slog.Logger
}

// Validate reports whether the configuration is usable.
func (c *Config) Validate() error {
	if c.Table == nil {
		return errors.New("vswitch: Config.Table is required")
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
	capTotals  captureTotals // capture.go
}

type portMap map[uint32]*portEntry

// portEntry is one attached port: one or more queues of the same kind, each
// read by a worker of its own.
type portEntry struct {
	no uint32
	q  []queue // queue 0 names the port
	// spread says whether frames toward the port are spread over its queues
	// by flow (multi-queue ports other than tunnels; see AddPortQueues).
	spread  bool
	stats   portCounters
	capture atomic.Pointer[Capture] // nil unless a capture runs (capture.go)
	cancel  context.CancelFunc
	done    chan struct{} // closed when every queue's worker has returned
}

// queue is one queue of a port. Exactly one of port and tunnel is set;
// offload and offTunnel are port or tunnel as their GSO-aware interfaces,
// when they implement them and the switch uses offloads.
type queue struct {
	port      Port
	tunnel    TunnelPort
	offload   OffloadPort
	offTunnel OffloadTunnelPort
}

func (q *queue) name() string {
	if q.tunnel != nil {
		return q.tunnel.Name()
	}
	return q.port.Name()
}

func (q *queue) batchSize() int {
	n := 0
	if q.tunnel != nil {
		n = q.tunnel.BatchSize()
	} else {
		n = q.port.BatchSize()
	}
	if n <= 0 {
		n = 1
	}
	return n
}

func (q *queue) close() error {
	if q.tunnel != nil {
		return q.tunnel.Close()
	}
	return q.port.Close()
}

func (e *portEntry) name() string { return e.q[0].name() }

// isTunnel reports whether the port is a tunnel port.
func (e *portEntry) isTunnel() bool { return e.q[0].tunnel != nil }

// takesGSO reports whether super-frames may be written to the port.
func (e *portEntry) takesGSO() bool { return e.q[0].offload != nil || e.q[0].offTunnel != nil }

// close closes every queue.
func (e *portEntry) close() error {
	var errs []error
	for i := range e.q {
		if err := e.q[i].close(); err != nil {
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
	s := &Switch{cfg: cfg, log: log}
	s.ports.Store(&portMap{})
	return s, nil
}

// AddPort attaches p as port number no and starts its worker. The switch
// owns p from now on and closes it when the port is removed.
func (s *Switch) AddPort(no uint32, p Port) error {
	return s.AddPortQueues(no, []Port{p})
}

// AddPortQueues attaches a port with several queues, such as the queues of a
// multi-queue TAP (tap.Config.MultiQueue), as port number no. Each queue gets
// a worker of its own that reads it, so the queues are served in parallel.
// Frames toward the port are spread over the queues by a symmetric hash of
// their IPv4 addresses and, for TCP, UDP and SCTP, ports: the frames of one
// flow, in either direction, always take the same queue, and a multi-queue
// TAP, which sends a flow's frames to userspace on the queue that flow was
// last written to, hands the replies to the same worker. The queues must be
// all of one kind (all or none OffloadPort) and distinct; queue 0 names the
// port. The switch owns every queue and closes each when the port is
// removed.
func (s *Switch) AddPortQueues(no uint32, queues []Port) error {
	e := &portEntry{no: no, q: make([]queue, len(queues))}
	for i, p := range queues {
		e.q[i].port = p
	}
	e.spread = len(queues) > 1
	return s.add(e)
}

// AddTunnel attaches a tunnel port as port number no (1 in the OpenShift
// program) and starts its worker. The switch owns p from now on.
func (s *Switch) AddTunnel(no uint32, p TunnelPort) error {
	return s.AddTunnelQueues(no, []TunnelPort{p})
}

// AddTunnelQueues attaches a tunnel port with several receive queues (the
// queues of a vxlan.Port with Config.Readers > 1) as port number no, with
// one reading worker per queue. A tunnel's queues share one send side, so
// every frame toward the port is written to queue 0. The switch owns every
// queue.
func (s *Switch) AddTunnelQueues(no uint32, queues []TunnelPort) error {
	e := &portEntry{no: no, q: make([]queue, len(queues))}
	for i, p := range queues {
		e.q[i].tunnel = p
	}
	return s.add(e)
}

func (s *Switch) add(e *portEntry) error {
	if len(e.q) == 0 {
		return fmt.Errorf("%w: %d has no queues", ErrInvalidPort, e.no)
	}
	for i := range e.q {
		q := &e.q[i]
		if q.port == nil && q.tunnel == nil {
			return fmt.Errorf("%w: %d: queue %d is nil", ErrInvalidPort, e.no, i)
		}
		if !s.cfg.NoOffload {
			q.offload, _ = q.port.(OffloadPort)
			q.offTunnel, _ = q.tunnel.(OffloadTunnelPort)
		}
		if (q.offload != nil || q.offTunnel != nil) != e.takesGSO() {
			return fmt.Errorf("%w: %d: queue %d differs from queue 0 in offloads", ErrInvalidPort, e.no, i)
		}
		for j := range i {
			if (q.port != nil && e.q[j].port == q.port) || (q.tunnel != nil && e.q[j].tunnel == q.tunnel) {
				return fmt.Errorf("%w: %d: queues %d and %d are the same", ErrInvalidPort, e.no, j, i)
			}
		}
	}
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
	s.ports.Store(&next)
	s.wg.Add(1)
	var workers sync.WaitGroup
	workers.Add(len(e.q))
	for i := range e.q {
		go s.worker(ctx, e, i, &workers)
	}
	go func() {
		workers.Wait()
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
	return errors.Join(errs...)
}

// PortInfo describes one attached port.
type PortInfo struct {
	No     uint32
	Name   string
	Tunnel bool
	Stats  PortStats
}

// Ports lists the attached ports, in no particular order.
func (s *Switch) Ports() []PortInfo {
	m := *s.ports.Load()
	out := make([]PortInfo, 0, len(m))
	for _, e := range m {
		out = append(out, PortInfo{No: e.no, Name: e.name(), Tunnel: e.isTunnel(), Stats: e.stats.snapshot()})
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
	return st
}

// Table returns the flow table the switch runs.
func (s *Switch) Table() *flowtable.Table { return s.cfg.Table }
