package flowtable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"
	"unsafe"

	"github.com/gvswitch/gvs/conntrack"
)

// Match is what a rule matches: a packet's Fields f match when
// f & Mask == Value, field by field. A zero Mask bit is a wildcard. Value is
// kept masked (Value & Mask == Value); the parsers and Table.Add ensure it.
type Match struct {
	Value Fields
	Mask  Fields
}

// ErrSyntax is wrapped by every error the rule, match and field parsers
// return (see SyntaxError).
var ErrSyntax = errors.New("flow syntax error")

// ErrInvalidRule is wrapped by the errors Table.Add and Table.Apply return
// for a rule that cannot be installed (unmet prerequisites, a backward
// goto_table, an unmasked non-maskable field).
var ErrInvalidRule = errors.New("invalid rule")

// SyntaxError describes a parse error: the column (1-based byte offset in the
// parsed text) of the offending token, the field or action name when known,
// and what is wrong. It wraps ErrSyntax.
type SyntaxError struct {
	Col   int
	Field string
	Msg   string
}

// Error implements error.
func (e *SyntaxError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("flow syntax error at column %d (%s): %s", e.Col, e.Field, e.Msg)
	}
	return fmt.Sprintf("flow syntax error at column %d: %s", e.Col, e.Msg)
}

// Unwrap returns ErrSyntax.
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// nWords is the size of Fields in 64-bit words. Fields holds no pointers and
// is 8-byte aligned (it has a uint64), so the lookup code reads it as words.
const nWords = int(unsafe.Sizeof(Fields{}) / 8)

type words [nWords]uint64

func asWords(f *Fields) *words { return (*words)(unsafe.Pointer(f)) }

// normalize masks m.Value with m.Mask, word by word (padding included).
func (m *Match) normalize() {
	v, k := asWords(&m.Value), asWords(&m.Mask)
	for i := range v {
		v[i] &= k[i]
	}
}

// Subsumes reports whether every packet that o matches is also matched by
// m, i.e. o is at least as specific as m (ovs-ofctl del-flows semantics).
// Both must be normalized.
func (m *Match) Subsumes(o *Match) bool {
	mv, mm := asWords(&m.Value), asWords(&m.Mask)
	ov, om := asWords(&o.Value), asWords(&o.Mask)
	for i := range mv {
		if mm[i]&^om[i] != 0 || ov[i]&mm[i] != mv[i] {
			return false
		}
	}
	return true
}

// Matches reports whether packet fields f are matched by m.
func (m *Match) Matches(f *Fields) bool {
	mv, mm, fw := asWords(&m.Value), asWords(&m.Mask), asWords(f)
	for i := range mv {
		if fw[i]&mm[i] != mv[i] {
			return false
		}
	}
	return true
}

// kind is how a match field's value is written.
type kind uint8

const (
	kDec kind = iota // decimal when exact, hex/hex when masked
	kHex             // always hex
	kMAC
	kIP
	kHexC    // always hex in C's %#x: "0" for zero (ct_mark, ct_label), as ovs-ofctl prints them
	kCtState // ct_state: flags (see parseCtState)
)

// prereq is a match field's prerequisite, as in OpenFlow.
type prereq uint8

const (
	preNone prereq = iota
	preIPorARP
	preARP
	preL4 // tcp, udp or sctp
	preTCP
	preUDP
	preSCTP
	preICMP
	preCT      // a valid connection state (ct_nw_proto): ct_state matches +new, +est, +rel, +rpl, +snat or +dnat, or +trk-inv
	preCTIP    // ip and a valid connection state (ct_nw_src, ct_nw_dst)
	preCTProto // a valid connection state and ct_nw_proto (ct_tp_src, ct_tp_dst)
)

// mfield describes one match field. get/set move the field's value, packed
// in a uint64 (MACs and IPv4 addresses big-endian), in and out of Fields.
type mfield struct {
	name     string
	bits     uint
	kind     kind
	maskable bool
	pre      prereq
	get      func(*Fields) uint64
	set      func(*Fields, uint64)
}

func mac64(a [6]byte) uint64 {
	return uint64(a[0])<<40 | uint64(a[1])<<32 | uint64(a[2])<<24 | uint64(a[3])<<16 | uint64(a[4])<<8 | uint64(a[5])
}

func macFrom64(v uint64) (a [6]byte) {
	a[0], a[1], a[2], a[3], a[4], a[5] = byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	return
}

func ip64(a [4]byte) uint64         { return uint64(binary.BigEndian.Uint32(a[:])) }
func ipFrom64(v uint64) (a [4]byte) { binary.BigEndian.PutUint32(a[:], uint32(v)); return }

// The match fields, by every name they are accepted under. The first name
// of each is the one printed (see matchOrder).
var (
	mInPort  = &mfield{"in_port", 32, kDec, false, preNone, func(f *Fields) uint64 { return uint64(f.InPort) }, func(f *Fields, v uint64) { f.InPort = uint32(v) }}
	mEthSrc  = &mfield{"dl_src", 48, kMAC, true, preNone, func(f *Fields) uint64 { return mac64(f.EthSrc) }, func(f *Fields, v uint64) { f.EthSrc = macFrom64(v) }}
	mEthDst  = &mfield{"dl_dst", 48, kMAC, true, preNone, func(f *Fields) uint64 { return mac64(f.EthDst) }, func(f *Fields, v uint64) { f.EthDst = macFrom64(v) }}
	mEthType = &mfield{"dl_type", 16, kHex, false, preNone, func(f *Fields) uint64 { return uint64(f.EthType) }, func(f *Fields, v uint64) { f.EthType = uint16(v) }}
	mNwSrc   = &mfield{"nw_src", 32, kIP, true, preIPorARP, func(f *Fields) uint64 { return ip64(f.NwSrc) }, func(f *Fields, v uint64) { f.NwSrc = ipFrom64(v) }}
	mNwDst   = &mfield{"nw_dst", 32, kIP, true, preIPorARP, func(f *Fields) uint64 { return ip64(f.NwDst) }, func(f *Fields, v uint64) { f.NwDst = ipFrom64(v) }}
	mNwProto = &mfield{"nw_proto", 8, kDec, false, preIPorARP, func(f *Fields) uint64 { return uint64(f.NwProto) }, func(f *Fields, v uint64) { f.NwProto = uint8(v) }}
	mArpOp   = &mfield{"arp_op", 16, kDec, false, preARP, func(f *Fields) uint64 { return uint64(f.ArpOp) }, func(f *Fields, v uint64) { f.ArpOp = uint16(v) }}
	mArpSha  = &mfield{"arp_sha", 48, kMAC, true, preARP, func(f *Fields) uint64 { return mac64(f.ArpSha) }, func(f *Fields, v uint64) { f.ArpSha = macFrom64(v) }}
	mArpTha  = &mfield{"arp_tha", 48, kMAC, true, preARP, func(f *Fields) uint64 { return mac64(f.ArpTha) }, func(f *Fields, v uint64) { f.ArpTha = macFrom64(v) }}
	mTpSrc   = &mfield{"tp_src", 16, kDec, true, preL4, func(f *Fields) uint64 { return uint64(f.TpSrc) }, func(f *Fields, v uint64) { f.TpSrc = uint16(v) }}
	mTpDst   = &mfield{"tp_dst", 16, kDec, true, preL4, func(f *Fields) uint64 { return uint64(f.TpDst) }, func(f *Fields, v uint64) { f.TpDst = uint16(v) }}
	mTunID   = &mfield{"tun_id", 64, kHex, true, preNone, func(f *Fields) uint64 { return f.TunID }, func(f *Fields, v uint64) { f.TunID = v }}
	mTunSrc  = &mfield{"tun_src", 32, kIP, true, preNone, func(f *Fields) uint64 { return ip64(f.TunSrc) }, func(f *Fields, v uint64) { f.TunSrc = ipFrom64(v) }}
	mTunDst  = &mfield{"tun_dst", 32, kIP, true, preNone, func(f *Fields) uint64 { return ip64(f.TunDst) }, func(f *Fields, v uint64) { f.TunDst = ipFrom64(v) }}

	// Connection tracking (ovs-fields(7)). ct_state has OpenFlow's 32 bits
	// but only the 8 flags OVS supports may be matched. ct_label is 128
	// bits, kept as two 64-bit halves that are parsed and printed as one
	// field.
	mCtState   = &mfield{"ct_state", 8, kCtState, true, preNone, func(f *Fields) uint64 { return uint64(f.CtState) }, func(f *Fields, v uint64) { f.CtState = conntrack.State(v) }}
	mCtZone    = &mfield{"ct_zone", 16, kDec, false, preNone, func(f *Fields) uint64 { return uint64(f.CtZone) }, func(f *Fields, v uint64) { f.CtZone = uint16(v) }}
	mCtMark    = &mfield{"ct_mark", 32, kHexC, true, preNone, func(f *Fields) uint64 { return uint64(f.CtMark) }, func(f *Fields, v uint64) { f.CtMark = uint32(v) }}
	mCtLabelHi = &mfield{"ct_label", 64, kHexC, true, preNone, func(f *Fields) uint64 { return f.CtLabel.Hi }, func(f *Fields, v uint64) { f.CtLabel.Hi = v }}
	mCtLabelLo = &mfield{"ct_label", 64, kHexC, true, preNone, func(f *Fields) uint64 { return f.CtLabel.Lo }, func(f *Fields, v uint64) { f.CtLabel.Lo = v }}
	mCtNwSrc   = &mfield{"ct_nw_src", 32, kIP, true, preCTIP, func(f *Fields) uint64 { return ip64(f.CtNwSrc) }, func(f *Fields, v uint64) { f.CtNwSrc = ipFrom64(v) }}
	mCtNwDst   = &mfield{"ct_nw_dst", 32, kIP, true, preCTIP, func(f *Fields) uint64 { return ip64(f.CtNwDst) }, func(f *Fields, v uint64) { f.CtNwDst = ipFrom64(v) }}
	mCtNwProto = &mfield{"ct_nw_proto", 8, kDec, false, preCT, func(f *Fields) uint64 { return uint64(f.CtNwProto) }, func(f *Fields, v uint64) { f.CtNwProto = uint8(v) }}
	mCtTpSrc   = &mfield{"ct_tp_src", 16, kDec, true, preCTProto, func(f *Fields) uint64 { return uint64(f.CtTpSrc) }, func(f *Fields, v uint64) { f.CtTpSrc = uint16(v) }}
	mCtTpDst   = &mfield{"ct_tp_dst", 16, kDec, true, preCTProto, func(f *Fields) uint64 { return uint64(f.CtTpDst) }, func(f *Fields, v uint64) { f.CtTpDst = uint16(v) }}
)

func regField(n int) *mfield {
	return &mfield{"reg" + strconv.Itoa(n), 32, kDec, true, preNone,
		func(f *Fields) uint64 { return uint64(f.Regs[n]) }, func(f *Fields, v uint64) { f.Regs[n] = uint32(v) }}
}

var mRegs = [8]*mfield{regField(0), regField(1), regField(2), regField(3), regField(4), regField(5), regField(6), regField(7)}

// fieldAlias is a name a match field is accepted under, with the
// prerequisite that name implies (tcp_dst needs tcp, tp_dst any L4).
type fieldAlias struct {
	f   *mfield
	pre prereq
}

func lookupMatchField(name string) (fieldAlias, bool) {
	switch name {
	case "in_port":
		return fieldAlias{mInPort, preNone}, true
	case "dl_src", "eth_src":
		return fieldAlias{mEthSrc, preNone}, true
	case "dl_dst", "eth_dst":
		return fieldAlias{mEthDst, preNone}, true
	case "dl_type", "eth_type":
		return fieldAlias{mEthType, preNone}, true
	case "nw_src", "ip_src", "arp_spa":
		return fieldAlias{mNwSrc, preIPorARP}, true
	case "nw_dst", "ip_dst", "arp_tpa":
		return fieldAlias{mNwDst, preIPorARP}, true
	case "nw_proto", "ip_proto":
		return fieldAlias{mNwProto, preIPorARP}, true
	case "arp_op":
		return fieldAlias{mArpOp, preARP}, true
	case "arp_sha":
		return fieldAlias{mArpSha, preARP}, true
	case "arp_tha":
		return fieldAlias{mArpTha, preARP}, true
	case "tp_src":
		return fieldAlias{mTpSrc, preL4}, true
	case "tp_dst":
		return fieldAlias{mTpDst, preL4}, true
	case "tcp_src":
		return fieldAlias{mTpSrc, preTCP}, true
	case "tcp_dst":
		return fieldAlias{mTpDst, preTCP}, true
	case "udp_src":
		return fieldAlias{mTpSrc, preUDP}, true
	case "udp_dst":
		return fieldAlias{mTpDst, preUDP}, true
	case "sctp_src":
		return fieldAlias{mTpSrc, preSCTP}, true
	case "sctp_dst":
		return fieldAlias{mTpDst, preSCTP}, true
	case "icmp_type":
		return fieldAlias{mTpSrc, preICMP}, true
	case "icmp_code":
		return fieldAlias{mTpDst, preICMP}, true
	case "tun_id", "tunnel_id":
		return fieldAlias{mTunID, preNone}, true
	case "tun_src":
		return fieldAlias{mTunSrc, preNone}, true
	case "tun_dst":
		return fieldAlias{mTunDst, preNone}, true
	case "ct_state":
		return fieldAlias{mCtState, preNone}, true
	case "ct_zone":
		return fieldAlias{mCtZone, preNone}, true
	case "ct_mark":
		return fieldAlias{mCtMark, preNone}, true
	case "ct_nw_src":
		return fieldAlias{mCtNwSrc, preCTIP}, true
	case "ct_nw_dst":
		return fieldAlias{mCtNwDst, preCTIP}, true
	case "ct_nw_proto":
		return fieldAlias{mCtNwProto, preCT}, true
	case "ct_tp_src":
		return fieldAlias{mCtTpSrc, preCTProto}, true
	case "ct_tp_dst":
		return fieldAlias{mCtTpDst, preCTProto}, true
	}
	if len(name) == 4 && strings.HasPrefix(name, "reg") && name[3] >= '0' && name[3] <= '7' {
		return fieldAlias{mRegs[name[3]-'0'], preNone}, true
	}
	return fieldAlias{}, false
}

// Protocol shorthands: dl_type and, for L4 ones, nw_proto.
func shorthand(name string) (ethType uint16, proto uint8, hasProto, ok bool) {
	switch name {
	case "ip", "ipv4":
		return 0x0800, 0, false, true
	case "arp":
		return 0x0806, 0, false, true
	case "tcp":
		return 0x0800, 6, true, true
	case "udp":
		return 0x0800, 17, true, true
	case "icmp":
		return 0x0800, 1, true, true
	case "sctp":
		return 0x0800, 132, true, true
	}
	return 0, 0, false, false
}

func fullMask(bits uint) uint64 {
	if bits >= 64 {
		return ^uint64(0)
	}
	return 1<<bits - 1
}

// parseUint parses a number as ovs-ofctl does (decimal, 0x hex, 0 octal)
// limited to bits bits.
func parseUint(s string, bits uint) (uint64, error) {
	if s == "" {
		return 0, errors.New("missing number")
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("bad number %q", s)
	}
	if v > fullMask(bits) {
		return 0, fmt.Errorf("%s does not fit in %d bits", s, bits)
	}
	return v, nil
}

func parseMAC(s string) (uint64, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 6 {
		return 0, fmt.Errorf("bad Ethernet address %q", s)
	}
	var v uint64
	for _, p := range parts {
		if len(p) < 1 || len(p) > 2 {
			return 0, fmt.Errorf("bad Ethernet address %q", s)
		}
		b, err := strconv.ParseUint(p, 16, 8)
		if err != nil {
			return 0, fmt.Errorf("bad Ethernet address %q", s)
		}
		v = v<<8 | b
	}
	return v, nil
}

func parseIP(s string) (uint64, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return 0, fmt.Errorf("bad IPv4 address %q", s)
	}
	return ip64(a.As4()), nil
}

// parseValue parses one field value in f's notation.
func parseValue(f *mfield, s string) (uint64, error) {
	switch f.kind {
	case kMAC:
		return parseMAC(s)
	case kIP:
		return parseIP(s)
	}
	return parseUint(s, f.bits)
}

// parseCtState parses a ct_state match as ovs-ofctl does (its
// parse_flags): a number with an optional mask ("0x21", "0x20/0x21"), flags
// each preceded by + or - ("+trk-new": the named bits must be set or clear,
// the others are wildcarded), or flags joined by | ("trk|new": exactly
// those set, every other supported flag clear). A flag may be named once
// in the +/- form; bits other than the 8 supported flags are refused.
func parseCtState(s string) (v, m uint64, err error) {
	const all = 0xff
	if s == "" {
		return 0, 0, errors.New("missing ct_state flags")
	}
	if s[0] >= '0' && s[0] <= '9' {
		vs, ms, masked := strings.Cut(s, "/")
		v, err := strconv.ParseUint(vs, 0, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("bad number %q", vs)
		}
		m := uint64(all)
		if masked {
			if m, err = strconv.ParseUint(ms, 0, 32); err != nil {
				return 0, 0, fmt.Errorf("bad number %q", ms)
			}
		}
		if v&^all != 0 || m&^all != 0 {
			return 0, 0, fmt.Errorf("%s: unknown ct_state flag(s)", s)
		}
		return v & m, m, nil
	}
	if s[0] == '+' || s[0] == '-' {
		for s != "" {
			set := s[0] == '+'
			if !set && s[0] != '-' {
				return 0, 0, fmt.Errorf("%s: want + or - before each ct_state flag", s)
			}
			s = s[1:]
			n := strings.IndexAny(s, "+-")
			if n < 0 {
				n = len(s)
			}
			bit, ok := ctStateBit(s[:n])
			if !ok {
				return 0, 0, fmt.Errorf("%q: unknown ct_state flag", s[:n])
			}
			if m&bit != 0 {
				return 0, 0, fmt.Errorf("%s: each ct_state flag can be given only once", s[:n])
			}
			m |= bit
			if set {
				v |= bit
			}
			s = s[n:]
		}
		return v, m, nil
	}
	for _, name := range strings.Split(s, "|") {
		bit, ok := ctStateBit(name)
		if !ok {
			return 0, 0, fmt.Errorf("%q: unknown ct_state flag", name)
		}
		v |= bit
	}
	return v, all, nil
}

// ctStateNames are the ct_state flags by bit, as ovs-fields(7) names them.
var ctStateNames = [8]string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}

func ctStateBit(name string) (uint64, bool) {
	for i, n := range ctStateNames {
		if n == name {
			return 1 << i, true
		}
	}
	return 0, false
}

// formatCtState prints a ct_state match as ovs-ofctl does: with every
// flag matched, the set ones joined by | ("0" for none); else each matched
// flag in bit order with + or - ("-new+trk").
func formatCtState(v, m uint64) string {
	var b strings.Builder
	if m == 0xff {
		if v == 0 {
			return "0"
		}
		for i, n := range ctStateNames {
			if v&(1<<i) != 0 {
				if b.Len() > 0 {
					b.WriteByte('|')
				}
				b.WriteString(n)
			}
		}
		return b.String()
	}
	for i, n := range ctStateNames {
		if m&(1<<i) != 0 {
			if v&(1<<i) != 0 {
				b.WriteByte('+')
			} else {
				b.WriteByte('-')
			}
			b.WriteString(n)
		}
	}
	return b.String()
}

// parseUint128 parses a 128-bit number: hexadecimal ("0x" and up to 32
// digits) or a decimal or octal number of up to 64 bits, as ovs-ofctl
// reads ct_label.
func parseUint128(s string) (conntrack.Label, error) {
	h, ok := strings.CutPrefix(s, "0x")
	if !ok {
		h, ok = strings.CutPrefix(s, "0X")
	}
	if !ok {
		v, err := parseUint(s, 64)
		return conntrack.Label{Lo: v}, err
	}
	if h == "" {
		return conntrack.Label{}, fmt.Errorf("bad number %q", s)
	}
	h = strings.TrimLeft(h, "0")
	if len(h) > 32 {
		return conntrack.Label{}, fmt.Errorf("%s does not fit in 128 bits", s)
	}
	var l conntrack.Label
	for _, c := range h {
		d, ok := hexDigit(c)
		if !ok {
			return conntrack.Label{}, fmt.Errorf("bad number %q", s)
		}
		l.Hi = l.Hi<<4 | l.Lo>>60
		l.Lo = l.Lo<<4 | d
	}
	return l, nil
}

func hexDigit(c rune) (uint64, bool) {
	switch {
	case c >= '0' && c <= '9':
		return uint64(c - '0'), true
	case c >= 'a' && c <= 'f':
		return uint64(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return uint64(c-'A') + 10, true
	}
	return 0, false
}

// parseLabel parses "value" or "value/mask" of ct_label.
func parseLabel(s string) (v, m conntrack.Label, err error) {
	vs, ms, masked := strings.Cut(s, "/")
	if v, err = parseUint128(vs); err != nil {
		return v, m, err
	}
	m = conntrack.Label{Hi: ^uint64(0), Lo: ^uint64(0)}
	if masked {
		if m, err = parseUint128(ms); err != nil {
			return v, m, err
		}
	}
	return conntrack.Label{Hi: v.Hi & m.Hi, Lo: v.Lo & m.Lo}, m, nil
}

// formatHex128 prints l in hexadecimal as C's %#x would: "0" for zero.
func formatHex128(l conntrack.Label) string {
	if l.Hi == 0 {
		return formatHexC(l.Lo)
	}
	lo := strconv.FormatUint(l.Lo, 16)
	return "0x" + strconv.FormatUint(l.Hi, 16) + strings.Repeat("0", 16-len(lo)) + lo
}

// formatHexC prints v in hexadecimal as C's %#x does: "0" for zero.
func formatHexC(v uint64) string {
	if v == 0 {
		return "0"
	}
	return "0x" + strconv.FormatUint(v, 16)
}

// formatLabel prints a ct_label match value.
func formatLabel(v, m conntrack.Label) string {
	s := formatHex128(v)
	if m.Hi != ^uint64(0) || m.Lo != ^uint64(0) {
		s += "/" + formatHex128(m)
	}
	return s
}

// parseFieldValue parses "value" or "value/mask" for field f.
func parseFieldValue(f *mfield, s string) (v, m uint64, err error) {
	if f.kind == kCtState {
		return parseCtState(s)
	}
	vs, ms, masked := strings.Cut(s, "/")
	if v, err = parseValue(f, vs); err != nil {
		return 0, 0, err
	}
	m = fullMask(f.bits)
	if !masked {
		return v & m, m, nil
	}
	if !f.maskable {
		return 0, 0, errors.New("field is not maskable")
	}
	if f.kind == kIP && !strings.Contains(ms, ".") {
		n, err := strconv.ParseUint(ms, 10, 8)
		if err != nil || n > 32 {
			return 0, 0, fmt.Errorf("bad prefix length %q", ms)
		}
		m = fullMask(32) &^ fullMask(uint(32-n))
	} else if m, err = parseValue(f, ms); err != nil {
		return 0, 0, err
	}
	return v & m, m, nil
}

// setMatch sets field f of m to v/msk, refusing a different earlier setting.
func setMatch(m *Match, f *mfield, v, msk uint64) error {
	ov, om := f.get(&m.Value), f.get(&m.Mask)
	if om != 0 && (ov != v || om != msk) {
		return errors.New("conflicts with an earlier setting of " + f.name)
	}
	f.set(&m.Value, v)
	f.set(&m.Mask, msk)
	return nil
}

// exact reports whether field f is matched exactly with value v.
func exact(m *Match, f *mfield, v uint64) bool {
	return f.get(&m.Mask) == fullMask(f.bits) && f.get(&m.Value) == v
}

// check verifies a prerequisite against m; it returns "" when met, or what
// is missing.
func (p prereq) check(m *Match) string {
	if p == preNone {
		return ""
	}
	et := m.Mask.EthType == 0xffff
	ip := et && m.Value.EthType == 0x0800
	arp := et && m.Value.EthType == 0x0806
	proto := func(n uint8) bool { return ip && m.Mask.NwProto == 0xff && m.Value.NwProto == n }
	switch p {
	case preIPorARP:
		if !ip && !arp {
			return "ip or arp (dl_type=0x0800 or 0x0806)"
		}
	case preARP:
		if !arp {
			return "arp"
		}
	case preL4:
		if !proto(6) && !proto(17) && !proto(132) {
			return "tcp, udp or sctp"
		}
	case preTCP:
		if !proto(6) {
			return "tcp"
		}
	case preUDP:
		if !proto(17) {
			return "udp"
		}
	case preSCTP:
		if !proto(132) {
			return "sctp"
		}
	case preICMP:
		if !proto(1) {
			return "icmp"
		}
	case preCT:
		if !ctValid(m) {
			return ctValidMsg
		}
	case preCTIP:
		if !ip {
			return "ip (dl_type=0x0800)"
		}
		if !ctValid(m) {
			return ctValidMsg
		}
	case preCTProto:
		if !ctValid(m) {
			return ctValidMsg
		}
		if m.Mask.CtNwProto != 0xff {
			return "ct_nw_proto"
		}
	}
	return ""
}

const ctValidMsg = "a tracked connection (ct_state with +new, +est, +rel, +rpl, +snat or +dnat, or with +trk-inv)"

// ctValid reports whether m's ct_state match implies a packet with a
// connection, as OVS's is_ct_valid requires before the ct_nw_* and ct_tp_*
// fields may be matched: it matches one of new, est, rel, rpl, snat and
// dnat as set, or trk as set and inv as clear.
func ctValid(m *Match) bool {
	const conn = conntrack.StateNew | conntrack.StateEst | conntrack.StateRel | conntrack.StateRpl |
		conntrack.StateSNAT | conntrack.StateDNAT
	v, mk := m.Value.CtState, m.Mask.CtState
	return v&conn != 0 || (v&conntrack.StateTrk != 0 && mk&conntrack.StateInv != 0 && v&conntrack.StateInv == 0)
}

// allFields lists every match field once, in printing order after in_port
// and the protocol.
var allFields = []*mfield{mCtState, mCtZone, mCtMark, mCtLabelHi, mCtLabelLo, mCtNwSrc, mCtNwDst, mCtNwProto, mCtTpSrc, mCtTpDst,
	mRegs[0], mRegs[1], mRegs[2], mRegs[3], mRegs[4], mRegs[5], mRegs[6], mRegs[7],
	mTunID, mTunSrc, mTunDst, mEthSrc, mEthDst, mNwSrc, mNwDst, mArpOp, mArpSha, mArpTha, mTpSrc, mTpDst}

// everyField is in_port, dl_type, nw_proto and allFields: every match
// field once.
var everyField = append([]*mfield{mInPort, mEthType, mNwProto}, allFields...)

// validate checks a normalized match: non-maskable fields are exact or
// wildcarded, and every matched field's prerequisites hold.
func (m *Match) validate() error {
	for _, f := range everyField {
		mk := f.get(&m.Mask)
		if mk == 0 {
			continue
		}
		if !f.maskable && mk != fullMask(f.bits) {
			return fmt.Errorf("%s is not maskable", f.name)
		}
		pre := f.pre
		if f == mTpSrc || f == mTpDst {
			if exact(m, mNwProto, 1) {
				pre = preICMP
			}
		}
		if miss := pre.check(m); miss != "" {
			return fmt.Errorf("%s requires %s", f.name, miss)
		}
	}
	return nil
}

// String prints m in ovs-ofctl syntax, comma separated; "" for match-all.
func (m Match) String() string {
	var b strings.Builder
	m.appendTo(&b)
	return b.String()
}

func (m *Match) appendTo(b *strings.Builder) {
	first := true
	put := func(s string) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(s)
	}
	if m.Mask.InPort != 0 {
		put("in_port=" + strconv.FormatUint(uint64(m.Value.InPort), 10))
	}
	protoShown, icmp := false, false
	if m.Mask.EthType != 0 {
		switch et := m.Value.EthType; {
		case et == 0x0806:
			put("arp")
		case et == 0x0800 && m.Mask.NwProto != 0:
			switch m.Value.NwProto {
			case 6, 17, 132:
				put(protoNames[m.Value.NwProto])
				protoShown = true
			case 1:
				put("icmp")
				protoShown, icmp = true, true
			default:
				put("ip")
			}
		case et == 0x0800:
			put("ip")
		default:
			put("dl_type=0x" + strconv.FormatUint(uint64(et), 16))
		}
	}
	if m.Mask.NwProto != 0 && !protoShown {
		put("nw_proto=" + strconv.FormatUint(uint64(m.Value.NwProto), 10))
	}
	// L4 ports print as tp_src/tp_dst whatever the protocol, as ovs-ofctl
	// prints them; ICMP's type and code under their own names.
	for _, f := range allFields {
		mk := f.get(&m.Mask)
		switch f {
		case mCtLabelHi: // ct_label: both halves at once
			if mk != 0 || m.Mask.CtLabel.Lo != 0 {
				put("ct_label=" + formatLabel(m.Value.CtLabel, m.Mask.CtLabel))
			}
			continue
		case mCtLabelLo:
			continue
		}
		if mk == 0 {
			continue
		}
		name := f.name
		switch {
		case f == mTpSrc && icmp:
			name = "icmp_type"
		case f == mTpDst && icmp:
			name = "icmp_code"
		}
		put(name + "=" + formatFieldValue(f, f.get(&m.Value), mk))
	}
}

var protoNames = map[uint8]string{6: "tcp", 17: "udp", 132: "sctp"}

func formatFieldValue(f *mfield, v, mk uint64) string {
	full := mk == fullMask(f.bits)
	switch f.kind {
	case kCtState:
		return formatCtState(v, mk)
	case kHexC:
		s := formatHexC(v)
		if !full {
			s += "/" + formatHexC(mk)
		}
		return s
	case kMAC:
		s := formatMAC(v)
		if !full {
			s += "/" + formatMAC(mk)
		}
		return s
	case kIP:
		s := netip.AddrFrom4(ipFrom64(v)).String()
		if !full {
			ones := bits.LeadingZeros32(^uint32(mk))
			if uint32(mk) == ^uint32(0)<<(32-ones) || (ones == 0 && mk == 0) {
				s += "/" + strconv.Itoa(ones)
			} else {
				s += "/" + netip.AddrFrom4(ipFrom64(mk)).String()
			}
		}
		return s
	case kDec:
		if full {
			return strconv.FormatUint(v, 10)
		}
	}
	s := "0x" + strconv.FormatUint(v, 16)
	if !full {
		s += "/0x" + strconv.FormatUint(mk, 16)
	}
	return s
}

func formatMAC(v uint64) string {
	const hexd = "0123456789abcdef"
	var buf [17]byte
	for i := 0; i < 6; i++ {
		b := byte(v >> (40 - 8*i))
		if i > 0 {
			buf[i*3-1] = ':'
		}
		buf[i*3] = hexd[b>>4]
		buf[i*3+1] = hexd[b&15]
	}
	return string(buf[:])
}

// setLabel sets the halves of ct_label that mk matches.
func setLabel(m *Match, v, mk conntrack.Label) error {
	if mk.Hi != 0 {
		if err := setMatch(m, mCtLabelHi, v.Hi, mk.Hi); err != nil {
			return err
		}
	}
	if mk.Lo != 0 {
		return setMatch(m, mCtLabelLo, v.Lo, mk.Lo)
	}
	return nil
}
