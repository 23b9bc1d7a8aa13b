package conntrack

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// The packet builders below compute every checksum from scratch with a
// plain 16-bit loop of their own (csumRef), independent of the
// package's sum/fold and of its incremental updates: they are the oracle
// the NAT tests compare rewritten packets with.

func csumRef(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

func ip4(s string) [4]byte { return netip.MustParseAddr(s).As4() }

// hdr describes a packet for build.
type hdr struct {
	src, dst     string
	proto        uint8
	sport, dport uint16 // TCP/UDP ports
	flags        uint8  // TCP flags
	seq, ack     uint32
	win          uint16
	opts         []byte // TCP options (padded to 4 bytes by the caller)
	icmpType     uint8
	icmpCode     uint8
	icmpID       uint16
	payload      int    // payload bytes (pattern-filled)
	ipID         uint16 // IP identification
	quote        []byte // ICMP error: the quoted packet (IP header + data)
	noUDPCsum    bool   // UDP sent without a checksum
}

// build makes the IPv4 packet h describes with correct checksums.
func build(h hdr) []byte {
	var l4 []byte
	switch h.proto {
	case ProtoTCP:
		hl := 20 + len(h.opts)
		l4 = make([]byte, hl+h.payload)
		binary.BigEndian.PutUint16(l4[0:], h.sport)
		binary.BigEndian.PutUint16(l4[2:], h.dport)
		binary.BigEndian.PutUint32(l4[4:], h.seq)
		binary.BigEndian.PutUint32(l4[8:], h.ack)
		l4[12] = byte(hl/4) << 4
		l4[13] = h.flags
		win := h.win
		if win == 0 {
			win = 65535
		}
		binary.BigEndian.PutUint16(l4[14:], win)
		copy(l4[20:], h.opts)
		fill(l4[hl:])
	case ProtoUDP:
		l4 = make([]byte, 8+h.payload)
		binary.BigEndian.PutUint16(l4[0:], h.sport)
		binary.BigEndian.PutUint16(l4[2:], h.dport)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		fill(l4[8:])
	case ProtoICMP:
		if h.quote != nil {
			l4 = make([]byte, 8+len(h.quote))
			copy(l4[8:], h.quote)
		} else {
			l4 = make([]byte, 8+h.payload)
			binary.BigEndian.PutUint16(l4[4:], h.icmpID)
			binary.BigEndian.PutUint16(l4[6:], 1)
			fill(l4[8:])
		}
		l4[0], l4[1] = h.icmpType, h.icmpCode
	case ProtoSCTP:
		l4 = make([]byte, 12+h.payload)
		binary.BigEndian.PutUint16(l4[0:], h.sport)
		binary.BigEndian.PutUint16(l4[2:], h.dport)
		fill(l4[12:])
	default:
		l4 = make([]byte, h.payload)
		fill(l4)
	}
	b := make([]byte, 20+len(l4))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], h.ipID)
	b[8] = 64
	b[9] = h.proto
	s, d := ip4(h.src), ip4(h.dst)
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	copy(b[20:], l4)
	refreshChecksums(b, h.noUDPCsum)
	return b
}

func fill(b []byte) {
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
}

// refreshChecksums recomputes b's checksums from scratch: IP header, and
// the L4 checksum of an unfragmented datagram (a TCP/UDP pseudo-header
// sum over the whole segment, ICMP over the message).
func refreshChecksums(b []byte, noUDPCsum bool) {
	b[10], b[11] = 0, 0
	binary.BigEndian.PutUint16(b[10:], csumRef(b[:20]))
	l4 := b[20:]
	switch b[9] {
	case ProtoTCP:
		l4[16], l4[17] = 0, 0
		binary.BigEndian.PutUint16(l4[16:], csumRef(append(pseudo(b, len(l4)), l4...)))
	case ProtoUDP:
		l4[6], l4[7] = 0, 0
		if !noUDPCsum {
			c := csumRef(append(pseudo(b, len(l4)), l4...))
			if c == 0 {
				c = 0xffff
			}
			binary.BigEndian.PutUint16(l4[6:], c)
		}
	case ProtoICMP:
		l4[2], l4[3] = 0, 0
		binary.BigEndian.PutUint16(l4[2:], csumRef(l4))
	}
}

// ipHeaderSum recomputes the IP header checksum alone.
func ipHeaderSum(b []byte) {
	b[10], b[11] = 0, 0
	binary.BigEndian.PutUint16(b[10:], csumRef(b[:20]))
}

func pseudo(b []byte, l4len int) []byte {
	p := make([]byte, 12)
	copy(p, b[12:20])
	p[9] = b[9]
	binary.BigEndian.PutUint16(p[10:], uint16(l4len))
	return p
}

// checkChecksums verifies b's checksums from scratch (the oracle): the IP
// header, the L4 checksum (a UDP zero means none), and for an ICMP error
// the quoted IP header's.
func checkChecksums(b []byte) error {
	if csumRef(b[:20]) != 0 {
		return fmt.Errorf("IP header checksum %#04x is wrong", binary.BigEndian.Uint16(b[10:]))
	}
	l4 := b[20:]
	switch b[9] {
	case ProtoTCP:
		if csumRef(append(pseudo(b, len(l4)), l4...)) != 0 {
			return fmt.Errorf("TCP checksum %#04x is wrong", binary.BigEndian.Uint16(l4[16:]))
		}
	case ProtoUDP:
		if binary.BigEndian.Uint16(l4[6:]) != 0 && csumRef(append(pseudo(b, len(l4)), l4...)) != 0 {
			return fmt.Errorf("UDP checksum %#04x is wrong", binary.BigEndian.Uint16(l4[6:]))
		}
	case ProtoICMP:
		if csumRef(l4) != 0 {
			return fmt.Errorf("ICMP checksum %#04x is wrong", binary.BigEndian.Uint16(l4[2:]))
		}
		if t := l4[0]; t == 3 || t == 11 || t == 12 || t == 4 || t == 5 {
			q := l4[8:]
			if csumRef(q[:20]) != 0 {
				return fmt.Errorf("quoted IP header checksum %#04x is wrong", binary.BigEndian.Uint16(q[10:]))
			}
		}
	}
	return nil
}

// quote returns what an ICMP error quotes of packet p: its IP header and
// the first n bytes after it.
func quote(p []byte, n int) []byte {
	return append([]byte(nil), p[:20+n]...)
}

// clock is an injectable clock for tests.
type clock struct{ now Time }

func (c *clock) Now() Time               { return c.now }
func (c *clock) advance(d time.Duration) { c.now += Time(d) }
func (c *clock) fn() func() Time         { return func() Time { return c.now } }

// newTracker returns a small tracker on an injected clock starting at 1 s.
func newTracker(t testing.TB, cfg Config) (*Tracker, *clock) {
	t.Helper()
	c := &clock{now: Time(time.Second)}
	cfg.Clock = c.fn()
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 1024
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr, c
}

// step is one packet through one ct action in a table-driven test.
type step struct {
	name   string
	pkt    []byte
	act    Action
	flags  PacketFlags
	state  State
	reason Reason
	want   []byte // the packet after the action, when it is rewritten
}

// run sends each step's packet through a fresh Meta and checks the
// ct_state, the reason and the rewritten packet (with the checksum
// oracle).
func run(t *testing.T, tr *Tracker, c *clock, steps []step) {
	t.Helper()
	for _, s := range steps {
		var m Meta
		b := append([]byte(nil), s.pkt...)
		r := tr.Process(c.Now(), b, s.flags, &s.act, &m)
		if m.State != s.state || r != s.reason {
			t.Errorf("%s: state %v reason %v, want %v %v", s.name, m.State, r, s.state, s.reason)
		}
		if s.want != nil {
			if string(b) != string(s.want) {
				t.Errorf("%s: packet\n got %x\nwant %x", s.name, b, s.want)
			}
			if err := checkChecksums(b); err != nil && s.flags&CsumPartial == 0 {
				t.Errorf("%s: %v", s.name, err)
			}
		}
		c.advance(time.Millisecond)
	}
}

var (
	commit = Action{Commit: true}
	lookup = Action{}
)

// Meta states, short.
const (
	trkNew    = StateTrk | StateNew
	trkEst    = StateTrk | StateEst
	trkEstRpl = StateTrk | StateEst | StateRpl
	trkInv    = StateTrk | StateInv
	trkRelRpl = StateTrk | StateRel | StateRpl
)
