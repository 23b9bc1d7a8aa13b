package conntrack

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Errors callers act on.
var (
	// ErrConfig: a Config field is out of range (Validate, New).
	ErrConfig = errors.New("conntrack: invalid config")
	// ErrAction: an Action cannot be carried out as written.
	ErrAction = errors.New("conntrack: invalid ct action")
	// ErrFormat: Load met input that is not a table saved by Save, or a
	// damaged one.
	ErrFormat = errors.New("conntrack: bad saved table")
	// ErrVersion: Load met a saved table of a format version it does not
	// know.
	ErrVersion = errors.New("conntrack: unsupported saved table version")
)

// DefaultMaxEntries is the global entry limit of a zero Config: Linux's
// nf_conntrack_max on a 64-bit node with more than 4 GiB of memory
// (262144 since Linux 5.15; the 2-core, 24 GiB node gvs targets reports
// exactly that). At about 139 bytes an entry (see docs/conntrack.md) the
// table takes 35 MiB, allocated once by New.
const DefaultMaxEntries = 262144

// MaxEntriesLimit is the largest MaxEntries New accepts (entry references
// are 31-bit).
const MaxEntriesLimit = 1 << 28

// DefaultMaxFragments is the fragment table size of a zero Config: first
// fragments whose later fragments are still expected.
const DefaultMaxFragments = 1024

// Class is what an entry's expiry depends on: its protocol and how far
// its connection has got. Each class has a timeout (Timeouts) and an
// entry count (Stats.ByClass).
type Class uint8

// The classes. The TCP ones follow OVS's conntrack-tcp timeout classes
// with Linux's names (and Linux's default values).
const (
	TCPSynSent     Class = iota // only the first side has spoken (OVS TCP_FIRST_PACKET)
	TCPSynRecv                  // both sides have spoken, not both established (OVS TCP_OPENING)
	TCPEstablished              // both sides established
	TCPFinWait                  // one side has sent a FIN (OVS TCP_CLOSING)
	TCPLastAck                  // both sides have sent a FIN, not both acknowledged (OVS TCP_FIN_WAIT)
	TCPTimeWait                 // both FINs acknowledged (OVS TCP_CLOSED)
	TCPClose                    // reset
	UDPUnreplied                // UDP, one direction only
	UDPReplied                  // UDP, both directions
	ICMPUnreplied               // ICMP query without its reply yet
	ICMPReplied                 // ICMP query answered
	OtherUnreplied              // another IP protocol, one direction only
	OtherReplied                // another IP protocol, both directions
	NumClasses
)

var classNames = [NumClasses]string{
	"tcp_syn_sent", "tcp_syn_recv", "tcp_established", "tcp_fin_wait", "tcp_last_ack",
	"tcp_time_wait", "tcp_close", "udp_unreplied", "udp_replied", "icmp_unreplied",
	"icmp_replied", "other_unreplied", "other_replied",
}

// String returns the class's name, as a metric label.
func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// evictable reports whether an entry of class c may be dropped early when
// the table is full: connections not seen in both directions, and TCP
// connections on their way out (Linux's early_drop takes the same:
// !ASSURED, or tcp_can_early_drop).
func (c Class) evictable() bool {
	switch c {
	case TCPEstablished, UDPReplied, ICMPReplied, OtherReplied:
		return false
	}
	return true
}

// Timeouts are the idle timeouts per Class; an entry expires when no
// packet has refreshed it for its class's timeout. A zero field takes the
// default (DefaultTimeouts), which are Linux's nf_conntrack defaults.
type Timeouts struct {
	TCPSynSent     time.Duration // 120 s (nf_conntrack_tcp_timeout_syn_sent)
	TCPSynRecv     time.Duration // 60 s (…_syn_recv)
	TCPEstablished time.Duration // 5 days (…_established)
	TCPFinWait     time.Duration // 120 s (…_fin_wait)
	TCPLastAck     time.Duration // 30 s (…_last_ack)
	TCPTimeWait    time.Duration // 120 s (…_time_wait)
	TCPClose       time.Duration // 10 s (…_close)
	UDPUnreplied   time.Duration // 30 s (nf_conntrack_udp_timeout)
	UDPReplied     time.Duration // 120 s (…_udp_timeout_stream)
	ICMPUnreplied  time.Duration // 30 s (nf_conntrack_icmp_timeout)
	ICMPReplied    time.Duration // 30 s
	OtherUnreplied time.Duration // 600 s (nf_conntrack_generic_timeout)
	OtherReplied   time.Duration // 600 s
	Fragment       time.Duration // 30 s (ipfrag_time): how long a first fragment's verdict waits for the rest
}

// DefaultTimeouts returns the timeouts a zero Timeouts stands for.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		TCPSynSent:     120 * time.Second,
		TCPSynRecv:     60 * time.Second,
		TCPEstablished: 5 * 24 * time.Hour,
		TCPFinWait:     120 * time.Second,
		TCPLastAck:     30 * time.Second,
		TCPTimeWait:    120 * time.Second,
		TCPClose:       10 * time.Second,
		UDPUnreplied:   30 * time.Second,
		UDPReplied:     120 * time.Second,
		ICMPUnreplied:  30 * time.Second,
		ICMPReplied:    30 * time.Second,
		OtherUnreplied: 600 * time.Second,
		OtherReplied:   600 * time.Second,
		Fragment:       30 * time.Second,
	}
}

// byClass returns the class timeouts as an array indexed by Class, in
// nanoseconds, with defaults filled in.
func (t Timeouts) byClass() (a [NumClasses]int64) {
	d := DefaultTimeouts()
	pick := func(v, def time.Duration) int64 {
		if v == 0 {
			return int64(def)
		}
		return int64(v)
	}
	a[TCPSynSent] = pick(t.TCPSynSent, d.TCPSynSent)
	a[TCPSynRecv] = pick(t.TCPSynRecv, d.TCPSynRecv)
	a[TCPEstablished] = pick(t.TCPEstablished, d.TCPEstablished)
	a[TCPFinWait] = pick(t.TCPFinWait, d.TCPFinWait)
	a[TCPLastAck] = pick(t.TCPLastAck, d.TCPLastAck)
	a[TCPTimeWait] = pick(t.TCPTimeWait, d.TCPTimeWait)
	a[TCPClose] = pick(t.TCPClose, d.TCPClose)
	a[UDPUnreplied] = pick(t.UDPUnreplied, d.UDPUnreplied)
	a[UDPReplied] = pick(t.UDPReplied, d.UDPReplied)
	a[ICMPUnreplied] = pick(t.ICMPUnreplied, d.ICMPUnreplied)
	a[ICMPReplied] = pick(t.ICMPReplied, d.ICMPReplied)
	a[OtherUnreplied] = pick(t.OtherUnreplied, d.OtherUnreplied)
	a[OtherReplied] = pick(t.OtherReplied, d.OtherReplied)
	return a
}

func (t Timeouts) fragment() int64 {
	if t.Fragment == 0 {
		return int64(DefaultTimeouts().Fragment)
	}
	return int64(t.Fragment)
}

// Config configures a Tracker. The zero Config is usable: 262144 entries,
// no zone limits, Linux's timeouts, the monotonic clock, no logging.
type Config struct {
	// MaxEntries is the global entry limit (0: DefaultMaxEntries). New
	// allocates storage for this many entries at once, so memory stays
	// flat however many connections arrive.
	MaxEntries int
	// DefaultZoneLimit caps the entries of every zone not in ZoneLimits
	// (0: no cap beyond MaxEntries), as OVS's default zone limit.
	DefaultZoneLimit int
	// ZoneLimits caps the entries of particular zones (0: no cap).
	ZoneLimits map[uint16]int
	// Timeouts per class; zero fields take Linux's defaults.
	Timeouts Timeouts
	// MaxFragments is how many fragmented datagrams can be in flight
	// (0: DefaultMaxFragments).
	MaxFragments int
	// NoTCPWindowCheck turns TCP sequence-window checks off (OVS's
	// "ovs-appctl dpctl/ct-disable-tcp-seq-chk"); flag checks stay.
	NoTCPWindowCheck bool
	// Clock returns the current time on a monotonic clock, in
	// nanoseconds. nil: time elapsed since New. Tests inject their own.
	// Process and Sweep take the time as an argument instead (read it
	// once per batch with Tracker.Now); the management calls (Dump, Save,
	// Load, Flush) read it here.
	Clock func() Time
	// Logger receives rare events (NAT exhaustion, a refused load); nil
	// discards them.
	Logger *slog.Logger
	// Accounting keeps, per connection, packet and byte counts per
	// direction and the times of its first and latest packets (Linux's
	// nf_conntrack_acct and timestamp), for flow export: Flows and OnEnd
	// (acct.go). It takes 88 bytes per entry more, allocated by New, and
	// per packet a second record written under the entry lock the packet
	// takes anyway.
	Accounting bool
	// OnEnd, with Accounting, receives what a connection counted since
	// its last report (Flows) when it is removed: expired, closed,
	// replaced, flushed or evicted. It runs on the goroutine that removed
	// it — a switch worker's among them, for a packet that found its
	// connection expired or made room — after the tracker's locks are let
	// go, so it must return at once without allocating (the flow exporter
	// queues the Flow, or drops it and counts the drop).
	OnEnd func(Flow)
}

// Validate reports the first field of c that is out of range.
func (c *Config) Validate() error {
	if c.MaxEntries < 0 || c.MaxEntries > MaxEntriesLimit {
		return fmt.Errorf("%w: MaxEntries %d not in 0..%d", ErrConfig, c.MaxEntries, MaxEntriesLimit)
	}
	if c.DefaultZoneLimit < 0 {
		return fmt.Errorf("%w: DefaultZoneLimit %d is negative", ErrConfig, c.DefaultZoneLimit)
	}
	for z, n := range c.ZoneLimits {
		if n < 0 {
			return fmt.Errorf("%w: zone %d limit %d is negative", ErrConfig, z, n)
		}
	}
	if c.MaxFragments < 0 || c.MaxFragments > 1<<20 {
		return fmt.Errorf("%w: MaxFragments %d not in 0..%d", ErrConfig, c.MaxFragments, 1<<20)
	}
	t := c.Timeouts
	for i, d := range []time.Duration{t.TCPSynSent, t.TCPSynRecv, t.TCPEstablished, t.TCPFinWait,
		t.TCPLastAck, t.TCPTimeWait, t.TCPClose, t.UDPUnreplied, t.UDPReplied, t.ICMPUnreplied,
		t.ICMPReplied, t.OtherUnreplied, t.OtherReplied, t.Fragment} {
		if d < 0 || d > maxTimeout {
			name := "Fragment"
			if i < int(NumClasses) {
				name = Class(i).String()
			}
			return fmt.Errorf("%w: timeout %s = %v not in 0..%v", ErrConfig, name, d, maxTimeout)
		}
	}
	return nil
}

// maxTimeout bounds every timeout (and every remaining timeout Load
// accepts): a year.
const maxTimeout = 365 * 24 * time.Hour
