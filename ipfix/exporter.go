package ipfix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gvswitch/gvs/conntrack"
)

// Defaults of a zero Config.
const (
	DefaultActiveTimeout   = 60 * time.Second // OVS's cache_active_timeout (ovs-vswitchd.conf.db(5), 0–4200 s) defaults to 0, no aggregation: a record per sampled packet; gvs always aggregates per connection
	DefaultIdleTimeout     = 15 * time.Second // NetFlow's customary inactive timeout
	DefaultTemplateRefresh = 60 * time.Second // RFC 7011 section 8.4 leaves it to configuration
	DefaultQueueLen        = 4096
	DefaultMaxRate         = 20000 // records a second
	DefaultMaxMessage      = 1400  // bytes: fits an underlay MTU of 1500 with room for tunnels
	DefaultInterval        = time.Second
)

// ErrConfig: a Config field is out of range.
var ErrConfig = errors.New("ipfix: invalid config")

// Config configures an Exporter. Zero fields take the defaults above.
type Config struct {
	// Collectors are the collecting processes, "host:port" (IPv4
	// literal addresses), each sent every message over UDP (RFC 7011
	// section 10.3). With none (until an Update names some) the exporter
	// does not walk the tracker, so a connection's counts wait there for
	// the first collector, and it discards the ended connections.
	Collectors []string
	// ActiveTimeout: a connection that lasts is reported every
	// ActiveTimeout with what it carried since its previous record. A
	// negative value turns active reports off.
	ActiveTimeout time.Duration
	// IdleTimeout: a connection without a packet for IdleTimeout is
	// reported then (flowEndReason idle), though the tracker may hold it
	// longer; later packets make new records. Negative: off.
	IdleTimeout time.Duration
	// TemplateRefresh is how often the templates are sent again (RFC
	// 7011 section 8.4: over UDP a collector that starts late, or lost
	// them, learns them from the next refresh).
	TemplateRefresh time.Duration
	// Domain is the observation domain ID of the messages.
	Domain uint32
	// Enterprise is the Private Enterprise Number of gvs's own elements
	// (0: DocumentationPEN).
	Enterprise uint32
	// QueueLen bounds the records of ended connections waiting to be
	// sent; when it is full, more are dropped and counted.
	QueueLen int
	// MaxRate bounds the records sent a second; beyond it the queue
	// fills and drops.
	MaxRate int
	// MaxMessage bounds a message's size in bytes (512..65535).
	MaxMessage int
	// Interval is how often the tracker is walked for idle and active
	// connections.
	Interval time.Duration
	// Resolve names the pods of addresses (nil: no names, VNID NoVNID).
	Resolve Resolver
	// Logger receives send errors, at most one a minute; nil discards.
	Logger *slog.Logger
}

// withDefaults returns c with zero fields filled in.
func (c Config) withDefaults() Config {
	pick := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	pick(&c.ActiveTimeout, DefaultActiveTimeout)
	pick(&c.IdleTimeout, DefaultIdleTimeout)
	pick(&c.TemplateRefresh, DefaultTemplateRefresh)
	pick(&c.Interval, DefaultInterval)
	if c.Enterprise == 0 {
		c.Enterprise = DocumentationPEN
	}
	if c.QueueLen == 0 {
		c.QueueLen = DefaultQueueLen
	}
	if c.MaxRate == 0 {
		c.MaxRate = DefaultMaxRate
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	return c
}

// Validate reports the first field of c out of range.
func (c *Config) Validate() error {
	for _, s := range c.Collectors {
		ap, err := netip.ParseAddrPort(s)
		if err != nil || !ap.Addr().Is4() || ap.Port() == 0 || ap.Addr().IsUnspecified() {
			return fmt.Errorf("%w: collector %q: want IPv4:port, such as 192.0.2.10:4739", ErrConfig, s)
		}
	}
	if c.TemplateRefresh < 0 || c.Interval < 0 {
		return fmt.Errorf("%w: negative templateRefresh or interval", ErrConfig)
	}
	if c.QueueLen < 0 || c.QueueLen > 1<<20 {
		return fmt.Errorf("%w: queue length %d not in 0..%d", ErrConfig, c.QueueLen, 1<<20)
	}
	if c.MaxRate < 0 {
		return fmt.Errorf("%w: negative rate %d", ErrConfig, c.MaxRate)
	}
	if c.MaxMessage != 0 && (c.MaxMessage < 512 || c.MaxMessage > 0xffff) {
		return fmt.Errorf("%w: maximum message %d not in 512..65535", ErrConfig, c.MaxMessage)
	}
	return nil
}

// Stats are an Exporter's counters.
type Stats struct {
	Records    uint64 // data records sent (each to every collector)
	Dropped    uint64 // records of ended connections dropped: the queue was full
	Messages   uint64 // messages sent (to each collector)
	SendErrors uint64 // failed sends to a collector
	Collectors int    // collectors the exporter sends to now
}

// Exporter is an IPFIX exporting process for a conntrack.Tracker with
// Accounting: it sends a record per direction of each connection when it
// ends (OnEnd, through a bounded queue), when it has been idle and while
// it lasts (Run walks the tracker), with the templates at start and
// every TemplateRefresh, to each collector over UDP.
//
// OnEnd and Update are safe for concurrent use and never block; Run is
// one goroutine, which alone builds and sends messages.
type Exporter struct {
	cfg     Config
	tmpl    [2]Template
	sock    *net.UDPConn                            // nil in tests
	writeTo func(b []byte, to netip.AddrPort) error // a message to a collector
	dest    []collector
	queue   chan conntrack.Flow
	updates chan Config // Update's latest, for Run
	log     *slog.Logger

	records, dropped, messages, sendErrors atomic.Uint64
	collectors                             atomic.Int64

	// Run's own.
	msg      Message
	buf      []byte
	set      uint16 // the open data set's template, 0 for none
	inMsg    uint32 // data records in the message being built
	seq      uint32
	lastTmpl time.Time // when the templates were last put in a message
	lastWarn time.Time
	tokens   float64
	lastFill time.Time
	recs     [2]Record
}

// New returns an exporter of cfg with its UDP socket (no packet leaves
// before Run). The socket is not connected: a connected one would report
// a collector's ICMP port unreachable on the next send and drop that
// message, so a collector that starts after gvs would lose the first
// records it could have had.
func New(cfg Config) (*Exporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := newExporter(cfg)
	sock, err := net.ListenUDP("udp4", nil)
	if err != nil {
		return nil, fmt.Errorf("ipfix: %w", err)
	}
	e.sock = sock
	e.writeTo = func(b []byte, to netip.AddrPort) error {
		_, err := sock.WriteToUDPAddrPort(b, to)
		return err
	}
	e.setCollectors(cfg.Collectors)
	return e, nil
}

// setCollectors makes list, which Validate accepted, the destinations.
func (e *Exporter) setCollectors(list []string) {
	e.dest = e.dest[:0]
	for _, c := range list {
		ap := netip.MustParseAddrPort(c)
		e.dest = append(e.dest, collector{name: c, write: func(b []byte) error { return e.writeTo(b, ap) }})
	}
	e.collectors.Store(int64(len(e.dest)))
}

// collector is where messages go: a name for the log and how to write
// one message there.
type collector struct {
	name  string
	write func([]byte) error
}

// newExporter is New without the sockets (the tests give their own).
func newExporter(cfg Config) *Exporter {
	cfg = cfg.withDefaults()
	e := &Exporter{cfg: cfg, tmpl: Templates(cfg.Enterprise), queue: make(chan conntrack.Flow, cfg.QueueLen),
		updates: make(chan Config, 1), log: cfg.Logger, buf: make([]byte, 0, cfg.MaxMessage+512), tokens: float64(cfg.MaxRate)}
	if e.log == nil {
		e.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return e
}

// OnEnd queues a connection's last report; it is the tracker's
// Config.OnEnd. It never blocks and does not allocate: with the queue
// full it drops the flow and counts its records as dropped.
func (e *Exporter) OnEnd(f conntrack.Flow) {
	select {
	case e.queue <- f:
	default:
		n := uint64(0)
		for _, p := range f.Packets {
			if p != 0 {
				n++
			}
		}
		e.dropped.Add(n)
	}
}

// Stats returns the exporter's counters.
func (e *Exporter) Stats() Stats {
	return Stats{Records: e.records.Load(), Dropped: e.dropped.Load(), Messages: e.messages.Load(),
		SendErrors: e.sendErrors.Load(), Collectors: int(e.collectors.Load())}
}

// Update hands Run a new configuration, which it applies between two
// messages: what it holds goes to the previous collectors, then the
// templates go to the new ones at once. Update takes Collectors,
// ActiveTimeout, IdleTimeout, TemplateRefresh, Domain, Enterprise and
// MaxRate from cfg (zero values the defaults, as in New); the queue, the
// message size, the interval, the resolver and the logger stay as New
// had them. The tracker is not touched: each connection's counts since
// its previous record go in its next record, to the collectors of then.
// An update Run has not yet taken is replaced by the next.
func (e *Exporter) Update(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	for {
		select {
		case e.updates <- cfg:
			return nil
		default:
			select {
			case <-e.updates: // not taken yet: replaced
			default:
			}
		}
	}
}

// apply makes cfg, from Update, the configuration (Run's).
func (e *Exporter) apply(cfg Config) {
	e.flush() // what was built goes where it was meant to
	cfg = cfg.withDefaults()
	c := &e.cfg
	c.Collectors = slices.Clone(cfg.Collectors)
	c.ActiveTimeout, c.IdleTimeout, c.TemplateRefresh = cfg.ActiveTimeout, cfg.IdleTimeout, cfg.TemplateRefresh
	c.Domain, c.MaxRate = cfg.Domain, cfg.MaxRate
	if cfg.Enterprise != c.Enterprise {
		c.Enterprise = cfg.Enterprise
		e.tmpl = Templates(c.Enterprise)
	}
	e.tokens = min(e.tokens, float64(c.MaxRate))
	e.setCollectors(c.Collectors)
	e.lastTmpl = time.Time{} // the new collectors learn the templates now
	e.begin()
	e.flush()
}

// Close closes the socket; call it after Run has returned.
func (e *Exporter) Close() {
	if e.sock != nil {
		e.sock.Close()
	}
}

// Run exports until ctx is done: it sends the templates, then every
// Interval walks t for idle and active connections (conntrack's Flows)
// and sends the ended ones as they arrive. It sends what it holds before
// it returns.
func (e *Exporter) Run(ctx context.Context, t *conntrack.Tracker) {
	tick := time.NewTicker(e.cfg.Interval)
	defer tick.Stop()
	e.lastFill = time.Now()
	e.begin()
	e.flush()
	for {
		select {
		case <-ctx.Done():
			e.drain(t)
			e.flush()
			return
		case f := <-e.queue:
			e.add(t, &f)
			e.drain(t)
			e.flush()
		case c := <-e.updates:
			e.apply(c)
		case <-tick.C:
			if len(e.dest) == 0 {
				continue // the counts wait in the tracker for a collector
			}
			active, idle := max(e.cfg.ActiveTimeout, 0), max(e.cfg.IdleTimeout, 0)
			t.Flows(t.Now(), active, idle, func(f *conntrack.Flow) { e.add(t, f) })
			e.flush()
		}
	}
}

// drain adds what the queue holds now.
func (e *Exporter) drain(t *conntrack.Tracker) {
	for {
		select {
		case f := <-e.queue:
			e.add(t, &f)
		default:
			return
		}
	}
}

// begin starts a message, with the templates first when they are due.
func (e *Exporter) begin() {
	now := time.Now()
	e.msg.Begin(e.buf, uint32(now.Unix()), e.seq, e.cfg.Domain)
	e.set, e.inMsg = 0, 0
	if e.lastTmpl.IsZero() || now.Sub(e.lastTmpl) >= e.cfg.TemplateRefresh {
		e.msg.StartSet(SetTemplate)
		for i := range e.tmpl {
			e.msg.AppendTemplate(&e.tmpl[i])
		}
		e.msg.EndSet()
		e.lastTmpl = now
	}
}

// add appends f's records to the message, sending it first when they
// would not fit, within the rate.
func (e *Exporter) add(t *conntrack.Tracker, f *conntrack.Flow) {
	if len(e.dest) == 0 {
		return // an ended connection with no collector to tell
	}
	n := Records(f, Clock{Wall: time.Now(), Now: t.Now()}, e.cfg.Resolve, &e.recs)
	for i := range n {
		e.pace()
		r := &e.recs[i]
		for {
			mark, set := e.msg.Mark(), e.set
			if id := r.TemplateID(); id != e.set {
				e.msg.StartSet(id)
				e.set = id
			}
			e.msg.SetBytes(AppendRecord(e.msg.Bytes(), r))
			// A record goes in a message of its own if it must (one
			// larger than MaxMessage: pod names are DNS names, so no
			// record of gvs's comes near).
			if e.msg.Len() <= e.cfg.MaxMessage || e.inMsg == 0 {
				e.inMsg++
				break
			}
			e.msg.Rewind(mark)
			e.set = set
			e.flush()
		}
	}
}

// pace takes a token of the rate, waiting for one when there are none.
func (e *Exporter) pace() {
	rate := float64(e.cfg.MaxRate)
	for {
		now := time.Now()
		e.tokens = min(rate, e.tokens+now.Sub(e.lastFill).Seconds()*rate)
		e.lastFill = now
		if e.tokens >= 1 {
			e.tokens--
			return
		}
		time.Sleep(time.Duration((1 - e.tokens) / rate * float64(time.Second)))
	}
}

// flush sends the message if it holds records or templates, and begins
// the next.
func (e *Exporter) flush() {
	if e.msg.Len() > HeaderLen {
		if b, err := e.msg.Finish(); err == nil {
			e.send(b)
			e.seq += e.inMsg
			e.records.Add(uint64(e.inMsg))
		} else {
			e.dropped.Add(uint64(e.inMsg)) // past 65535 bytes: cannot be sent
		}
	}
	e.begin()
}

// send writes one message to every collector.
func (e *Exporter) send(b []byte) {
	for _, c := range e.dest {
		if err := c.write(b); err != nil {
			e.sendErrors.Add(1)
			if now := time.Now(); now.Sub(e.lastWarn) >= time.Minute {
				e.lastWarn = now
				e.log.Warn("ipfix: sending to a collector failed", "collector", c.name, "err", err)
			}
			continue
		}
		e.messages.Add(1)
	}
}
