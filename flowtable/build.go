package flowtable

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gvswitch/gvs/conntrack"
)

// Building rules in Go, without text:
//
//  1. A match is a list of Cond values, one per field (InPort, IP, NwDst,
//     TpDst, Reg, ...), each the typed twin of a key=value item of the
//     text syntax.
//  2. Actions are Action values made by OutputPort, GotoTable, Load, Move,
//     SetField, ...; a FieldRef names the bits an action reads or writes
//     (FieldReg0.Whole(), FieldTunID.Bits(0, 31)).
//  3. NewRule puts them together and checks the rule as ParseRule checks
//     its text: values fit their fields, prerequisites hold, actions name
//     writable fields and go_table goes forward. A Builder collects many
//     rules and keeps the first error.
//
// A rule built this way is Equal to the one ParseRule makes of its String.
// The connection-tracking fields and actions follow the same pattern:
// CtState, CtZone, CtMark, CtLabel, CtNwSrc … CtTpDst; Ct(CT{…}) and
// CtClear (ct.go).

// Cond is one condition of a match built in Go: a field, the value it
// must have and the bits that count. The zero Cond adds nothing. A Cond
// made from an unusable value (an IPv6 address for an IPv4 field, a
// register that does not exist) makes NewRule fail.
type Cond struct {
	f    *mfield // the field, nil for none
	v, m uint64  // value (masked by m) and mask; m == 0 wildcards f
	f2   *mfield // a second field: nw_proto of tcp, udp, ...; ct_label's low half
	v2   uint64
	m2   uint64
	pre  prereq // what the condition's name requires (tcp_dst: tcp; tp_dst: tcp, udp or sctp)
	bad  string // why the condition cannot be built, "" when it can
}

// name returns the condition's name in the text syntax, for errors.
func (c Cond) name() string {
	switch {
	case c.pre == preICMP && c.f == mTpSrc:
		return "icmp_type"
	case c.pre == preICMP && c.f == mTpDst:
		return "icmp_code"
	case c.f != nil:
		return c.f.name
	}
	return "condition"
}

func exactCond(f *mfield, v uint64) Cond {
	return Cond{f: f, v: v & fullMask(f.bits), m: fullMask(f.bits), pre: f.pre}
}

func maskedCond(f *mfield, v, mask uint64) Cond {
	mask &= fullMask(f.bits)
	return Cond{f: f, v: v & mask, m: mask, pre: f.pre}
}

func shorthandCond(ethType uint16, proto uint8, hasProto bool) Cond {
	c := exactCond(mEthType, uint64(ethType))
	c.pre = preNone
	if hasProto {
		c.f2, c.v2, c.m2 = mNwProto, uint64(proto), 0xff
	}
	return c
}

func badCond(f *mfield, format string, args ...any) Cond {
	return Cond{f: f, bad: fmt.Sprintf(format, args...)}
}

// ipv4 returns a as a packed IPv4 address; IPv4-mapped IPv6 addresses are
// unmapped.
func ipv4(a netip.Addr) (uint64, bool) {
	a = a.Unmap()
	if !a.Is4() {
		return 0, false
	}
	return ip64(a.As4()), true
}

func addrCond(f *mfield, a netip.Addr) Cond {
	v, ok := ipv4(a)
	if !ok {
		return badCond(f, "%v is not an IPv4 address", a)
	}
	return exactCond(f, v)
}

func prefixCond(f *mfield, p netip.Prefix) Cond {
	v, ok := ipv4(p.Addr())
	if !ok || !p.IsValid() {
		return badCond(f, "%v is not an IPv4 prefix", p)
	}
	bits := p.Bits()
	if p.Addr().Is4In6() {
		bits -= 96
	}
	if bits < 0 {
		return badCond(f, "%v is not an IPv4 prefix", p)
	}
	return maskedCond(f, v, fullMask(32)&^fullMask(uint(32-bits)))
}

// InPort matches the input port (in_port=port).
func InPort(port uint32) Cond { return exactCond(mInPort, uint64(port)) }

// EthSrc matches the Ethernet source address (dl_src=mac).
func EthSrc(mac [6]byte) Cond { return exactCond(mEthSrc, mac64(mac)) }

// EthSrcMasked matches the bits of the Ethernet source address set in mask
// (dl_src=mac/mask).
func EthSrcMasked(mac, mask [6]byte) Cond { return maskedCond(mEthSrc, mac64(mac), mac64(mask)) }

// EthDst matches the Ethernet destination address (dl_dst=mac).
func EthDst(mac [6]byte) Cond { return exactCond(mEthDst, mac64(mac)) }

// EthDstMasked matches the bits of the Ethernet destination address set in
// mask (dl_dst=mac/mask).
func EthDstMasked(mac, mask [6]byte) Cond { return maskedCond(mEthDst, mac64(mac), mac64(mask)) }

// EthType matches the EtherType (dl_type=t).
func EthType(t uint16) Cond { return exactCond(mEthType, uint64(t)) }

// IP matches IPv4 packets (ip: dl_type=0x0800).
func IP() Cond { return shorthandCond(0x0800, 0, false) }

// ARP matches ARP packets (arp: dl_type=0x0806).
func ARP() Cond { return shorthandCond(0x0806, 0, false) }

// TCP matches TCP over IPv4 (tcp: dl_type=0x0800, nw_proto=6).
func TCP() Cond { return shorthandCond(0x0800, 6, true) }

// UDP matches UDP over IPv4 (udp: dl_type=0x0800, nw_proto=17).
func UDP() Cond { return shorthandCond(0x0800, 17, true) }

// SCTP matches SCTP over IPv4 (sctp: dl_type=0x0800, nw_proto=132).
func SCTP() Cond { return shorthandCond(0x0800, 132, true) }

// ICMP matches ICMP over IPv4 (icmp: dl_type=0x0800, nw_proto=1).
func ICMP() Cond { return shorthandCond(0x0800, 1, true) }

// NwProto matches the IP protocol, or for ARP the low byte of the opcode
// (nw_proto=p). It requires IP or ARP.
func NwProto(p uint8) Cond { return exactCond(mNwProto, uint64(p)) }

// NwSrc matches the IPv4 source address, or ARP's sender protocol address
// (nw_src=a). It requires IP or ARP.
func NwSrc(a netip.Addr) Cond { return addrCond(mNwSrc, a) }

// NwSrcPrefix matches the IPv4 source address against a prefix
// (nw_src=p); a /0 prefix matches everything. It requires IP or ARP.
func NwSrcPrefix(p netip.Prefix) Cond { return prefixCond(mNwSrc, p) }

// NwDst matches the IPv4 destination address, or ARP's target protocol
// address (nw_dst=a). It requires IP or ARP.
func NwDst(a netip.Addr) Cond { return addrCond(mNwDst, a) }

// NwDstPrefix matches the IPv4 destination address against a prefix
// (nw_dst=p). It requires IP or ARP.
func NwDstPrefix(p netip.Prefix) Cond { return prefixCond(mNwDst, p) }

// ArpOp matches the ARP opcode (arp_op=op). It requires ARP.
func ArpOp(op uint16) Cond { return exactCond(mArpOp, uint64(op)) }

// ArpSha matches ARP's sender hardware address (arp_sha=mac). It requires
// ARP.
func ArpSha(mac [6]byte) Cond { return exactCond(mArpSha, mac64(mac)) }

// ArpTha matches ARP's target hardware address (arp_tha=mac). It requires
// ARP.
func ArpTha(mac [6]byte) Cond { return exactCond(mArpTha, mac64(mac)) }

// TpSrc matches the TCP, UDP or SCTP source port (tp_src=port). It
// requires TCP, UDP or SCTP.
func TpSrc(port uint16) Cond { return exactCond(mTpSrc, uint64(port)) }

// TpSrcMasked matches the bits of the source port set in mask
// (tp_src=port/mask).
func TpSrcMasked(port, mask uint16) Cond { return maskedCond(mTpSrc, uint64(port), uint64(mask)) }

// TpDst matches the TCP, UDP or SCTP destination port (tp_dst=port). It
// requires TCP, UDP or SCTP.
func TpDst(port uint16) Cond { return exactCond(mTpDst, uint64(port)) }

// TpDstMasked matches the bits of the destination port set in mask
// (tp_dst=port/mask).
func TpDstMasked(port, mask uint16) Cond { return maskedCond(mTpDst, uint64(port), uint64(mask)) }

// ICMPType matches the ICMP type (icmp_type=t). It requires ICMP.
func ICMPType(t uint8) Cond {
	c := exactCond(mTpSrc, uint64(t))
	c.pre = preICMP
	return c
}

// ICMPCode matches the ICMP code (icmp_code=c). It requires ICMP.
func ICMPCode(code uint8) Cond {
	c := exactCond(mTpDst, uint64(code))
	c.pre = preICMP
	return c
}

// TunID matches the tunnel ID, the VNI of VXLAN (tun_id=id).
func TunID(id uint64) Cond { return exactCond(mTunID, id) }

// TunIDMasked matches the bits of the tunnel ID set in mask
// (tun_id=id/mask).
func TunIDMasked(id, mask uint64) Cond { return maskedCond(mTunID, id, mask) }

// TunSrc matches the tunnel's outer IPv4 source address (tun_src=a).
func TunSrc(a netip.Addr) Cond { return addrCond(mTunSrc, a) }

// TunSrcPrefix matches the tunnel's outer source address against a prefix.
func TunSrcPrefix(p netip.Prefix) Cond { return prefixCond(mTunSrc, p) }

// TunDst matches the tunnel's outer IPv4 destination address (tun_dst=a).
func TunDst(a netip.Addr) Cond { return addrCond(mTunDst, a) }

// TunDstPrefix matches the tunnel's outer destination address against a
// prefix.
func TunDstPrefix(p netip.Prefix) Cond { return prefixCond(mTunDst, p) }

// Reg matches register n, 0 to 7 (regN=v).
func Reg(n int, v uint32) Cond { return RegMasked(n, v, ^uint32(0)) }

// RegMasked matches the bits of register n set in mask (regN=v/mask).
func RegMasked(n int, v, mask uint32) Cond {
	if n < 0 || n >= len(mRegs) {
		return badCond(nil, "no register reg%d (0-7)", n)
	}
	return maskedCond(mRegs[n], uint64(v), uint64(mask))
}

// CtState matches the ct_state flags in set as set and those in clear as
// clear, the others wildcarded: ct_state=+trk+est-new is
// CtState(conntrack.StateTrk|conntrack.StateEst, conntrack.StateNew). A
// flag in both, or a bit that is not one of the 8 flags, makes the rule
// invalid.
func CtState(set, clear conntrack.State) Cond {
	if set&clear != 0 {
		return badCond(mCtState, "ct_state flags %s both set and clear", set&clear)
	}
	return CtStateMasked(set, set|clear)
}

// CtStateMasked matches ct_state=v/mask (the bits of mask must equal
// those of v). CtStateMasked(v, 0xff) is the exact form ct_state=trk|est.
func CtStateMasked(v, mask conntrack.State) Cond {
	if (v|mask)&^0xff != 0 {
		return badCond(mCtState, "unknown ct_state flag(s) %#x", uint32((v|mask)&^0xff))
	}
	return maskedCond(mCtState, uint64(v), uint64(mask))
}

// CtZone matches the zone of the last ct action (ct_zone=z).
func CtZone(z uint16) Cond { return exactCond(mCtZone, uint64(z)) }

// CtMark matches the connection's mark (ct_mark=v).
func CtMark(v uint32) Cond { return exactCond(mCtMark, uint64(v)) }

// CtMarkMasked matches the bits of the connection's mark set in mask
// (ct_mark=v/mask).
func CtMarkMasked(v, mask uint32) Cond { return maskedCond(mCtMark, uint64(v), uint64(mask)) }

// CtLabel matches the connection's 128-bit label (ct_label=l).
func CtLabel(l conntrack.Label) Cond {
	return CtLabelMasked(l, conntrack.Label{Hi: ^uint64(0), Lo: ^uint64(0)})
}

// CtLabelMasked matches the bits of the connection's label set in mask
// (ct_label=l/mask).
func CtLabelMasked(l, mask conntrack.Label) Cond {
	return Cond{f: mCtLabelHi, v: l.Hi & mask.Hi, m: mask.Hi, f2: mCtLabelLo, v2: l.Lo & mask.Lo, m2: mask.Lo}
}

// CtNwSrc matches the source address of the connection's original
// direction (ct_nw_src=a). Like every ct_nw_* and ct_tp_* field it
// requires IP and a ct_state that implies a connection (see CtState).
func CtNwSrc(a netip.Addr) Cond { return addrCond(mCtNwSrc, a) }

// CtNwSrcPrefix matches ct_nw_src against a prefix.
func CtNwSrcPrefix(p netip.Prefix) Cond { return prefixCond(mCtNwSrc, p) }

// CtNwDst matches the destination address of the connection's original
// direction (ct_nw_dst=a).
func CtNwDst(a netip.Addr) Cond { return addrCond(mCtNwDst, a) }

// CtNwDstPrefix matches ct_nw_dst against a prefix.
func CtNwDstPrefix(p netip.Prefix) Cond { return prefixCond(mCtNwDst, p) }

// CtNwProto matches the connection's IP protocol (ct_nw_proto=p).
func CtNwProto(p uint8) Cond { return exactCond(mCtNwProto, uint64(p)) }

// CtTpSrc matches the source port of the connection's original direction
// (ct_tp_src=port; for ICMP its type). It requires CtNwProto.
func CtTpSrc(port uint16) Cond { return exactCond(mCtTpSrc, uint64(port)) }

// CtTpSrcMasked matches the bits of ct_tp_src set in mask.
func CtTpSrcMasked(port, mask uint16) Cond { return maskedCond(mCtTpSrc, uint64(port), uint64(mask)) }

// CtTpDst matches the destination port of the connection's original
// direction (ct_tp_dst=port; for ICMP its code). It requires CtNwProto.
func CtTpDst(port uint16) Cond { return exactCond(mCtTpDst, uint64(port)) }

// CtTpDstMasked matches the bits of ct_tp_dst set in mask.
func CtTpDstMasked(port, mask uint16) Cond { return maskedCond(mCtTpDst, uint64(port), uint64(mask)) }

// NewMatch returns the match of conds, checked as ParseMatch checks text:
// a field given twice must have the same value, every field's
// prerequisites must hold, and non-maskable fields are exact. Errors wrap
// ErrInvalidRule.
func NewMatch(conds ...Cond) (Match, error) {
	var m Match
	if err := m.set(conds); err != nil {
		return Match{}, fmt.Errorf("%w: %w", ErrInvalidRule, err)
	}
	return m, nil
}

// set applies conds to m as parseMatchPart applies the items of a text.
func (m *Match) set(conds []Cond) error {
	for i := range conds {
		c := &conds[i]
		if c.bad != "" {
			return errors.New(c.bad)
		}
		if c.f == nil || c.m == 0 && c.m2 == 0 {
			continue // nothing, or fully wildcarded
		}
		if c.m != 0 {
			if err := setMatch(m, c.f, c.v, c.m); err != nil {
				return fmt.Errorf("%s: %w", c.name(), err)
			}
		}
		if c.f2 != nil && c.m2 != 0 {
			if err := setMatch(m, c.f2, c.v2, c.m2); err != nil {
				return fmt.Errorf("%s: %w", c.name(), err)
			}
		}
	}
	for i := range conds {
		c := &conds[i]
		if c.f == nil || c.m == 0 && c.m2 == 0 {
			continue
		}
		if miss := c.pre.check(m); miss != "" {
			return fmt.Errorf("%s requires %s", c.name(), miss)
		}
	}
	return m.validate()
}

// NewRule returns the rule "table=table, priority=priority, cookie=cookie,
// match, actions=actions" built from Go values and checked as ParseRule
// checks text (see NewMatch; actions as Table.Add checks them). No actions
// means drop. The actions are copied, keeping only the fields each kind
// uses. Errors wrap ErrInvalidRule.
func NewRule(table uint8, priority uint16, cookie uint64, match []Cond, actions ...Action) (*Rule, error) {
	r := &Rule{Table: table, Priority: priority, Cookie: cookie, slot: nextSlot()}
	if err := r.Match.set(match); err != nil {
		return nil, fmt.Errorf("%w: table %d priority %d: %w", ErrInvalidRule, table, priority, err)
	}
	if len(actions) > 0 {
		r.Actions = make([]Action, len(actions))
		for i, a := range actions {
			r.Actions[i] = a.normalized()
		}
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRule, r, err)
	}
	return r, nil
}

// normalized returns a with only the fields its kind uses (see Action), as
// the parser makes it, so that an Action written as a literal with other
// fields set is Equal to the parsed one.
func (a Action) normalized() Action {
	n := Action{Kind: a.Kind}
	switch a.Kind {
	case ActOutput:
		n.Port = a.Port
	case ActOutputReg:
		n.Src = a.Src
	case ActGotoTable, ActResubmit:
		n.Table = a.Table
	case ActLoad, ActSetField:
		n.Value, n.Dst = a.Value, a.Dst
	case ActMove:
		n.Src, n.Dst = a.Src, a.Dst
	case ActNote:
		if len(a.Note) > 0 {
			n.Note = append([]byte(nil), a.Note...)
		}
	case ActCT:
		if a.CT != nil {
			c := a.CT.normalized()
			n.CT = &c
		}
	case ActInPort, ActCTClear:
	default:
		return a // refused by check
	}
	return n
}

// Builder collects rules made with NewRule, so that a program of many
// rules is written without an error check per rule: after the first error
// Add does nothing and Rules returns that error. The zero Builder is ready
// to use; a Builder is not safe for concurrent use.
type Builder struct {
	rules []*Rule
	err   error
}

// Add builds a rule as NewRule does and appends it.
func (b *Builder) Add(table uint8, priority uint16, cookie uint64, match []Cond, actions ...Action) {
	if b.err != nil {
		return
	}
	r, err := NewRule(table, priority, cookie, match, actions...)
	if err != nil {
		b.err = fmt.Errorf("rule %d: %w", len(b.rules)+1, err)
		return
	}
	b.rules = append(b.rules, r)
}

// Rules returns the rules added so far, in order, or the first error.
func (b *Builder) Rules() ([]*Rule, error) {
	if b.err != nil {
		return nil, b.err
	}
	return b.rules, nil
}

// Whole returns a reference to all of f's bits (NXM_NX_REG0[]).
func (f Field) Whole() FieldRef { return FieldRef{Field: f, NBits: f.Width()} }

// Bits returns a reference to bits lo to hi of f, both included, bit 0
// being the least significant (NXM_NX_TUN_ID[0..31]). A range outside the
// field makes the rule that uses it invalid.
func (f Field) Bits(lo, hi uint8) FieldRef {
	if hi < lo {
		return FieldRef{Field: f, Ofs: lo} // no bits: refused by NewRule and Table.Add
	}
	return FieldRef{Field: f, Ofs: lo, NBits: hi - lo + 1}
}

// RegField returns the field of register n, or FieldNone (which actions
// refuse) when n is not 0 to 7.
func RegField(n int) Field {
	if n < 0 || n > 7 {
		return FieldNone
	}
	return FieldReg0 + Field(n)
}

// OutputPort sends the packet to port (output:port). PortInPort means the
// input port, as the in_port action.
func OutputPort(port uint32) Action {
	if port == PortInPort {
		return Action{Kind: ActInPort}
	}
	return Action{Kind: ActOutput, Port: port}
}

// OutputField sends the packet to the port number held in src
// (output:NXM_NX_REG2[]).
func OutputField(src FieldRef) Action { return Action{Kind: ActOutputReg, Src: src} }

// OutputInPort sends the packet back out of its input port (in_port).
func OutputInPort() Action { return Action{Kind: ActInPort} }

// GotoTable continues in table t (goto_table:t); it must be the last
// action and go forward.
func GotoTable(t uint8) Action { return Action{Kind: ActGotoTable, Table: t} }

// Resubmit runs table t and then carries on with the next action
// (resubmit(,t)).
func Resubmit(t uint8) Action { return Action{Kind: ActResubmit, Table: t} }

// Load writes v into dst (load:v->dst); v must fit in dst's bits.
func Load(v uint64, dst FieldRef) Action { return Action{Kind: ActLoad, Value: v, Dst: dst} }

// Move copies src into dst (move:src->dst); both have the same width.
func Move(src, dst FieldRef) Action { return Action{Kind: ActMove, Src: src, Dst: dst} }

// SetField writes v into the whole of field dst (set_field:v->dst). MAC
// and IPv4 values are packed big-endian in v; SetFieldMAC and
// SetFieldIPv4 pack them.
func SetField(dst Field, v uint64) Action {
	return Action{Kind: ActSetField, Value: v, Dst: dst.Whole()}
}

// SetFieldIPv4 writes an IPv4 address into dst (set_field:10.0.0.2->tun_dst).
func SetFieldIPv4(dst Field, a [4]byte) Action { return SetField(dst, ip64(a)) }

// SetFieldMAC writes a MAC address into dst (set_field:0a:58:..->eth_dst).
func SetFieldMAC(dst Field, mac [6]byte) Action { return SetField(dst, mac64(mac)) }

// Note is an action without effect that carries bytes (note:01.02); b is
// copied.
func Note(b []byte) Action {
	if len(b) == 0 {
		return Action{Kind: ActNote}
	}
	return Action{Kind: ActNote, Note: append([]byte(nil), b...)}
}
