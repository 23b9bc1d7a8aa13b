package flowtable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/conntrack"
)

var (
	a10_128_0_3 = netip.MustParseAddr("10.128.0.3")
	mac3        = [6]byte{0x0a, 0x58, 0x0a, 0x80, 0x00, 0x03}
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// typedCases are rules built in Go, each with the text that means the same
// rule; together they use every Cond and Action constructor.
var typedCases = []struct {
	table    uint8
	priority uint16
	cookie   uint64
	match    []Cond
	actions  []Action
	text     string
}{
	{0, 200, 0, []Cond{InPort(1), ARP(), NwSrcPrefix(pfx("10.128.0.0/14")), NwDstPrefix(pfx("10.128.0.0/23"))},
		[]Action{Move(FieldTunID.Bits(0, 31), FieldReg0.Whole()), GotoTable(10)},
		"table=0, priority=200, in_port=1, arp, nw_src=10.128.0.0/14, nw_dst=10.128.0.0/23, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10"},
	{20, 100, 0x10a800003, []Cond{InPort(3), ARP(), NwSrc(a10_128_0_3), ArpSha(mac3)},
		[]Action{Load(5, FieldReg0.Whole()), GotoTable(30)},
		"table=20, priority=100, cookie=0x10a800003, in_port=3, arp, nw_src=10.128.0.3, arp_sha=0a:58:0a:80:00:03, actions=load:0x5->NXM_NX_REG0[],goto_table:30"},
	{20, 300, 0, []Cond{UDP(), TpDst(4789)}, nil, "table=20, priority=300, udp, tp_dst=4789, actions=drop"},
	{80, 100, 0x30000000a, []Cond{Reg(0, 10), Reg(1, 10)}, []Action{OutputField(FieldReg2.Whole())},
		"table=80, priority=100, cookie=0x30000000a, reg0=10, reg1=10, actions=output:NXM_NX_REG2[]"},
	{80, 100, 0, []Cond{RegMasked(0, 0x17, 0xf0)}, []Action{OutputField(FieldReg2.Bits(0, 15))},
		"table=80, priority=100, reg0=0x10/0xf0, actions=output:NXM_NX_REG2[0..15]"},
	{90, 100, 0x2c0a8640c, []Cond{IP(), NwDstPrefix(pfx("10.128.2.0/23"))},
		[]Action{Move(FieldReg0.Whole(), FieldTunID.Bits(0, 31)), SetFieldIPv4(FieldTunDst, [4]byte{192, 168, 100, 12}), OutputPort(1)},
		"table=90, priority=100, cookie=0x2c0a8640c, ip, nw_dst=10.128.2.0/23, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:192.168.100.12->tun_dst,output:1"},
	{10, 100, 0, []Cond{TunSrc(netip.MustParseAddr("192.168.100.12"))}, []Action{GotoTable(30)},
		"table=10, priority=100, tun_src=192.168.100.12, actions=goto_table:30"},
	{5, 10, 0, []Cond{EthSrcMasked([6]byte{0x0a, 0x58}, [6]byte{0xff, 0xff}), EthDst([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})},
		[]Action{OutputPort(7)},
		"table=5, priority=10, dl_src=0a:58:00:00:00:00/ff:ff:00:00:00:00, dl_dst=ff:ff:ff:ff:ff:ff, actions=output:7"},
	{5, 10, 0, []Cond{TCP(), TpSrcMasked(0x1234, 0xf000), TpDst(80)}, []Action{OutputPort(7)},
		"table=5, priority=10, tcp, tp_src=0x1000/0xf000, tp_dst=80, actions=output:7"},
	{5, 10, 0, []Cond{SCTP(), TpDstMasked(9, 0xffff)}, []Action{OutputPort(7)}, "table=5, priority=10, sctp, tp_dst=9, actions=output:7"},
	{5, 10, 0, []Cond{ICMP(), ICMPType(8), ICMPCode(0)}, []Action{OutputPort(7)}, "table=5, priority=10, icmp, icmp_type=8, icmp_code=0, actions=output:7"},
	{5, 10, 0, []Cond{ARP(), ArpOp(1), ArpTha([6]byte{})}, []Action{OutputPort(7)}, "table=5, priority=10, arp, arp_op=1, arp_tha=00:00:00:00:00:00, actions=output:7"},
	{5, 10, 0, []Cond{IP(), NwProto(47)}, []Action{OutputPort(7)}, "table=5, priority=10, ip, nw_proto=47, actions=output:7"},
	{5, 10, 0, []Cond{EthType(0x86dd)}, []Action{OutputPort(7)}, "table=5, priority=10, dl_type=0x86dd, actions=output:7"},
	{5, 10, 0, []Cond{TunIDMasked(0x105, 0xff), TunDstPrefix(pfx("10.0.0.0/8"))}, []Action{OutputPort(7)},
		"table=5, priority=10, tun_id=0x5/0xff, tun_dst=10.0.0.0/8, actions=output:7"},
	{5, 10, 0, []Cond{TunID(5), TunDst(netip.MustParseAddr("10.0.0.9"))}, []Action{OutputPort(7)},
		"table=5, priority=10, tun_id=0x5, tun_dst=10.0.0.9, actions=output:7"},
	{5, 10, 0, []Cond{TunSrcPrefix(pfx("10.1.0.0/16")), IP(), NwSrcPrefix(pfx("0.0.0.0/0"))}, []Action{OutputPort(7)},
		"table=5, priority=10, ip, tun_src=10.1.0.0/16, actions=output:7"},
	{5, 10, 0, []Cond{RegMasked(3, 1, 1)},
		[]Action{Load(1, FieldReg4.Bits(3, 3)), Load(0xff, FieldReg5.Bits(8, 15)), Move(FieldReg3.Bits(0, 7), FieldReg6.Bits(24, 31)), GotoTable(6)},
		"table=5, priority=10, reg3=0x1/0x1, actions=load:0x1->NXM_NX_REG4[3],load:0xff->NXM_NX_REG5[8..15],move:NXM_NX_REG3[0..7]->NXM_NX_REG6[24..31],goto_table:6"},
	{5, 10, 0, nil,
		[]Action{SetField(RegField(0), 7), SetField(FieldTunID, 0x1234), SetFieldMAC(FieldEthDst, [6]byte{0x0a, 0x58, 0x0a, 0x80, 0, 5}), OutputPort(3)},
		"table=5, priority=10, actions=set_field:0x7->reg0,set_field:0x1234->tun_id,set_field:0a:58:0a:80:00:05->eth_dst,output:3"},
	{110, 100, 0, []Cond{Reg(0, 5)}, []Action{Resubmit(111), Resubmit(120)}, "table=110, priority=100, reg0=5, actions=resubmit(,111),resubmit(,120)"},
	{120, 100, 0, []Cond{IP(), NwDst(netip.MustParseAddr("::ffff:224.1.2.3"))}, []Action{OutputPort(4), OutputPort(PortInPort), OutputInPort()},
		"table=120, priority=100, ip, nw_dst=224.1.2.3, actions=output:4,in_port,in_port"},
	{253, 0, 0, []Cond{{}}, []Action{Note([]byte{1, 0xff})}, "table=253, priority=0, actions=note:01.ff"},
	{253, 0, 0, nil, []Action{Note(nil)}, "table=253, priority=0, actions=note:"},
}

// TestTypedEqualsParsed checks both ways that a rule built in Go is the
// rule its text parses to: NewRule equals ParseRule(text), its String is
// that text, and parsing its String gives it back.
func TestTypedEqualsParsed(t *testing.T) {
	for _, c := range typedCases {
		r, err := NewRule(c.table, c.priority, c.cookie, c.match, c.actions...)
		if err != nil {
			t.Errorf("NewRule for %q: %v", c.text, err)
			continue
		}
		p, err := ParseRule(c.text)
		if err != nil {
			t.Fatalf("ParseRule(%q): %v", c.text, err)
		}
		if !r.Equal(p) {
			t.Errorf("typed and parsed rules differ:\n typed  %s %+v\n parsed %s %+v", r, r.Match, p, p.Match)
		}
		if got := r.String(); got != c.text {
			t.Errorf("String:\n got  %s\n want %s", got, c.text)
		}
		back, err := ParseRule(r.String())
		if err != nil || !back.Equal(r) {
			t.Errorf("String of the typed rule does not parse back to it: %v", err)
		}
	}
}

// TestTypedCopies checks that NewRule and Note do not keep the caller's
// slices, so that reusing them cannot change an installed rule.
func TestTypedCopies(t *testing.T) {
	acts := []Action{OutputPort(3)}
	note := []byte{1, 2}
	r, err := NewRule(0, 1, 0, nil, append(acts, Note(note))...)
	if err != nil {
		t.Fatal(err)
	}
	acts[0] = OutputPort(9)
	note[0] = 9
	if got := r.String(); got != "table=0, priority=1, actions=output:3,note:01.02" {
		t.Errorf("rule changed with the caller's slices: %s", got)
	}
}

// TestTypedRefused checks that an invalid typed rule is an error wrapping
// ErrInvalidRule, and no panic, wherever the parser refuses the text of
// the same rule.
func TestTypedRefused(t *testing.T) {
	v6 := netip.MustParseAddr("fd00::1")
	cases := []struct {
		name    string
		table   uint8
		match   []Cond
		actions []Action
		text    string // the same rule as text, refused by ParseRule; "" if text cannot say it
		want    string
	}{
		{"nw_src without ip", 0, []Cond{NwSrc(a10_128_0_3)}, nil, "nw_src=10.128.0.3 actions=drop", "requires ip or arp"},
		{"tp_dst without L4", 0, []Cond{IP(), TpDst(80)}, nil, "ip, tp_dst=80 actions=drop", "requires tcp, udp or sctp"},
		{"icmp_type on tcp", 0, []Cond{TCP(), ICMPType(3)}, nil, "tcp, icmp_type=3 actions=drop", "requires icmp"},
		{"tp_src on icmp", 0, []Cond{ICMP(), TpSrc(3)}, nil, "icmp, tp_src=3 actions=drop", "requires tcp, udp or sctp"},
		{"arp_sha on ip", 0, []Cond{IP(), ArpSha(mac3)}, nil, "ip, arp_sha=0a:58:0a:80:00:03 actions=drop", "requires arp"},
		{"arp_op without arp", 0, []Cond{ArpOp(1)}, nil, "arp_op=1 actions=drop", "requires arp"},
		{"nw_proto without ip", 0, []Cond{NwProto(6)}, nil, "nw_proto=6 actions=drop", "requires ip or arp"},
		{"tcp then arp", 0, []Cond{TCP(), ARP()}, nil, "tcp, arp actions=drop", "conflicts"},
		{"two in_ports", 0, []Cond{InPort(1), InPort(2)}, nil, "in_port=1, in_port=2 actions=drop", "conflicts"},
		{"IPv6 address", 0, []Cond{IP(), NwDst(v6)}, nil, "ip, nw_dst=fd00::1 actions=drop", "not an IPv4"},
		{"IPv6 prefix", 0, []Cond{IP(), NwSrcPrefix(pfx("fd00::/64"))}, nil, "ip, nw_src=fd00::/64 actions=drop", "not an IPv4"},
		{"zero prefix", 0, []Cond{TunSrcPrefix(netip.Prefix{})}, nil, "", "not an IPv4"},
		{"zero address", 0, []Cond{TunDst(netip.Addr{})}, nil, "", "not an IPv4"},
		{"register 8", 0, []Cond{Reg(8, 1)}, nil, "reg8=1 actions=drop", "no register"},
		{"register -1", 0, []Cond{RegMasked(-1, 1, 1)}, nil, "", "no register"},
		{"table 255", 255, nil, nil, "table=255 actions=drop", "255"},
		{"reserved port 0", 0, nil, []Action{OutputPort(0)}, "actions=output:0", "reserved"},
		{"reserved port", 0, nil, []Action{OutputPort(PortMax)}, "actions=output:4294967040", "reserved"},
		{"goto backwards", 5, nil, []Action{GotoTable(5)}, "table=5 actions=goto_table:5", "forward"},
		{"goto not last", 0, nil, []Action{GotoTable(5), OutputPort(1)}, "actions=goto_table:5,output:1", "last"},
		{"resubmit 255", 0, nil, []Action{Resubmit(255)}, "actions=resubmit(,255)", "255"},
		{"load too wide", 0, nil, []Action{Load(0x100, FieldReg0.Bits(0, 7))}, "actions=load:0x100->NXM_NX_REG0[0..7]", "fit"},
		{"load read-only", 0, nil, []Action{Load(1, FieldNwSrc.Whole())}, "actions=load:0x1->NXM_OF_IP_SRC[]", "read-only"},
		{"load outside field", 0, nil, []Action{Load(1, FieldReg0.Bits(30, 40))}, "actions=load:0x1->NXM_NX_REG0[30..40]", "outside"},
		{"bits reversed", 0, nil, []Action{Load(1, FieldReg0.Bits(7, 3))}, "actions=load:0x1->NXM_NX_REG0[7..3]", ""},
		{"move widths", 0, nil, []Action{Move(FieldReg0.Whole(), FieldReg1.Bits(0, 15))}, "actions=move:NXM_NX_REG0[]->NXM_NX_REG1[0..15]", "width"},
		{"move read-only", 0, nil, []Action{Move(FieldReg0.Whole(), FieldNwDst.Whole())}, "actions=move:NXM_NX_REG0[]->NXM_OF_IP_DST[]", "read-only"},
		{"set read-only", 0, nil, []Action{SetFieldMAC(FieldEthSrc, mac3)}, "actions=set_field:0a:58:0a:80:00:03->eth_src", "read-only"},
		{"set too wide", 0, nil, []Action{SetField(FieldReg0, 1<<32)}, "actions=set_field:0x100000000->reg0", "fit"},
		{"no such field", 0, nil, []Action{SetField(Field(200), 1)}, "actions=set_field:1->nosuch", "field"},
		{"register field 9", 0, nil, []Action{Load(1, RegField(9).Whole())}, "actions=load:0x1->NXM_NX_REG9[]", "field"},
		{"output from nothing", 0, nil, []Action{OutputField(FieldRef{})}, "", "no such field"},
		{"zero action", 0, nil, []Action{{}}, "", "unknown action"},
	}
	for _, c := range cases {
		r, err := NewRule(c.table, 100, 0, c.match, c.actions...)
		if err == nil {
			t.Errorf("%s: NewRule accepted %s", c.name, r)
			continue
		}
		if !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewRule error %q, want ErrInvalidRule and %q", c.name, err, c.want)
		}
		if c.text != "" {
			if _, err := ParseRule(c.text); err == nil {
				t.Errorf("%s: ParseRule(%q) accepted what NewRule refuses", c.name, c.text)
			}
		}
		if c.actions == nil {
			if _, err := NewMatch(c.match...); err == nil && c.table != 255 {
				t.Errorf("%s: NewMatch accepted the match", c.name)
			}
		}
		var b Builder
		b.Add(0, 1, 0, nil, OutputPort(1))
		b.Add(c.table, 100, 0, c.match, c.actions...)
		b.Add(0, 2, 0, nil, OutputPort(1))
		if rs, err := b.Rules(); err == nil || rs != nil || !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), "rule 2:") {
			t.Errorf("%s: Builder.Rules = %d rules, %v; want the second rule's error", c.name, len(rs), err)
		}
	}
}

func TestBuilder(t *testing.T) {
	var b Builder
	if rs, err := b.Rules(); rs != nil || err != nil {
		t.Fatalf("empty Builder: %v, %v", rs, err)
	}
	for _, c := range typedCases {
		b.Add(c.table, c.priority, c.cookie, c.match, c.actions...)
	}
	rs, err := b.Rules()
	if err != nil || len(rs) != len(typedCases) {
		t.Fatalf("Rules = %d, %v", len(rs), err)
	}
	for i, r := range rs {
		if r.String() != typedCases[i].text {
			t.Errorf("rule %d: %s, want %s", i, r, typedCases[i].text)
		}
	}
	tbl := New(Config{})
	if err := tbl.Add(rs...); err != nil {
		t.Fatal(err)
	}
}

// condMenu pairs Cond constructors with the text item that means the same,
// for FuzzTypedMatchesText; each takes its arguments from the fuzzer.
var condMenu = append(baseCondMenu[:len(baseCondMenu):len(baseCondMenu)], ctCondMenu...)

var baseCondMenu = []func(a uint64, b uint64) (Cond, string){
	func(a, _ uint64) (Cond, string) { return InPort(uint32(a)), fmt.Sprintf("in_port=%d", uint32(a)) },
	func(_, _ uint64) (Cond, string) { return IP(), "ip" },
	func(_, _ uint64) (Cond, string) { return ARP(), "arp" },
	func(_, _ uint64) (Cond, string) { return TCP(), "tcp" },
	func(_, _ uint64) (Cond, string) { return UDP(), "udp" },
	func(_, _ uint64) (Cond, string) { return SCTP(), "sctp" },
	func(_, _ uint64) (Cond, string) { return ICMP(), "icmp" },
	func(a, b uint64) (Cond, string) {
		p := netip.PrefixFrom(addr4(a), int(b%33))
		return NwSrcPrefix(p), "nw_src=" + p.String()
	},
	func(a, _ uint64) (Cond, string) { return NwDst(addr4(a)), "nw_dst=" + addr4(a).String() },
	func(a, _ uint64) (Cond, string) { return TpDst(uint16(a)), fmt.Sprintf("tp_dst=%d", uint16(a)) },
	func(a, b uint64) (Cond, string) {
		return TpSrcMasked(uint16(a), uint16(b)), fmt.Sprintf("tp_src=%#x/%#x", uint16(a), uint16(b))
	},
	func(a, _ uint64) (Cond, string) { return ICMPType(uint8(a)), fmt.Sprintf("icmp_type=%d", uint8(a)) },
	func(a, _ uint64) (Cond, string) { return ICMPCode(uint8(a)), fmt.Sprintf("icmp_code=%d", uint8(a)) },
	func(a, b uint64) (Cond, string) {
		n := int(b>>32) % 9
		return RegMasked(n, uint32(a), uint32(b)), fmt.Sprintf("reg%d=%#x/%#x", n, uint32(a), uint32(b))
	},
	func(a, b uint64) (Cond, string) { return TunIDMasked(a, b), fmt.Sprintf("tun_id=%#x/%#x", a, b) },
	func(a, b uint64) (Cond, string) {
		return EthSrcMasked(macFrom64(a), macFrom64(b)), "dl_src=" + formatMAC(a&fullMask(48)) + "/" + formatMAC(b&fullMask(48))
	},
	func(a, _ uint64) (Cond, string) { return ArpSha(macFrom64(a)), "arp_sha=" + formatMAC(a&fullMask(48)) },
	func(a, _ uint64) (Cond, string) { return ArpOp(uint16(a)), fmt.Sprintf("arp_op=%d", uint16(a)) },
	func(a, _ uint64) (Cond, string) { return NwProto(uint8(a)), fmt.Sprintf("nw_proto=%d", uint8(a)) },
	func(a, _ uint64) (Cond, string) { return EthType(uint16(a)), fmt.Sprintf("dl_type=%#x", uint16(a)) },
	func(a, _ uint64) (Cond, string) { return TunSrc(addr4(a)), "tun_src=" + addr4(a).String() },
}

func addr4(v uint64) netip.Addr { return netip.AddrFrom4(ipFrom64(v & fullMask(32))) }

// FuzzTypedMatchesText builds random matches both in Go and as text and
// checks that NewMatch and ParseMatch agree: both refuse, or both give the
// same match, whose String parses back to it.
func FuzzTypedMatchesText(f *testing.F) {
	f.Add([]byte{3, 9, 0, 0, 0, 0, 0, 0, 0, 80})
	f.Add([]byte{1, 7, 10, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 14})
	f.Add([]byte{6, 11, 8, 9, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var conds []Cond
		var items []string
		for len(data) > 0 && len(conds) < 8 {
			op := int(data[0]) % len(condMenu)
			data = data[1:]
			var a, b uint64
			if len(data) >= 8 {
				a, data = binary.BigEndian.Uint64(data), data[8:]
			}
			if len(data) >= 8 {
				b, data = binary.BigEndian.Uint64(data), data[8:]
			}
			c, item := condMenu[op](a, b)
			conds = append(conds, c)
			items = append(items, item)
		}
		text := strings.Join(items, ",")
		typed, terr := NewMatch(conds...)
		parsed, perr := ParseMatch(text)
		if (terr == nil) != (perr == nil) {
			t.Fatalf("%q: NewMatch error %v, ParseMatch error %v", text, terr, perr)
		}
		if terr != nil {
			if !errors.Is(terr, ErrInvalidRule) {
				t.Fatalf("NewMatch error %v does not wrap ErrInvalidRule", terr)
			}
			return
		}
		if typed != parsed {
			t.Fatalf("%q: typed %+v, parsed %+v", text, typed, parsed)
		}
		back, err := ParseMatch(typed.String())
		if err != nil || back != typed {
			t.Fatalf("%q: String %q parses to %+v, %v", text, typed.String(), back, err)
		}
	})
}

// FuzzNewRuleActions builds rules from arbitrary Action values (any kind,
// field, bit range, port, table and value): NewRule must refuse or accept
// without panicking, and an accepted rule's text must parse back to it.
func FuzzNewRuleActions(f *testing.F) {
	f.Add(uint8(20), []byte{byte(ActLoad), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, byte(FieldReg0), 0, 32})
	f.Add(uint8(0), []byte{byte(ActMove), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(FieldTunID), 0, 32, byte(FieldReg0), 0, 32})
	f.Add(uint8(0), []byte{byte(ActSetField), 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2, 0, 0, 0, byte(FieldTunDst), 0, 32})
	f.Add(uint8(0), []byte{byte(ActCT), 0x05, 0, 7, 0, 1, 2, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(0), []byte{byte(ActCT), 0x1d, 0, 0, 0, 2, 3, 10, 0, 0, 1, 10, 0, 0, 9, byte(FieldReg0), 0, 16, 0x41})
	f.Fuzz(func(t *testing.T, table uint8, data []byte) {
		var acts []Action
		for len(data) >= 19 && len(acts) < 4 {
			d := data[:19]
			data = data[19:]
			a := Action{
				Kind:  ActionKind(d[0] % 12),
				Port:  binary.BigEndian.Uint32(d[1:]),
				Table: d[5],
				Value: binary.BigEndian.Uint64(d[6:]) >> (d[14] % 64),
				Src:   FieldRef{Field(d[13] % 20), d[14] % 70, d[15] % 70},
				Dst:   FieldRef{Field(d[16] % 20), d[17] % 70, d[18] % 70},
			}
			switch a.Kind {
			case ActNote:
				a.Note = d[1 : 1+d[5]%10]
			case ActCT:
				a.CT = fuzzCT(d)
			}
			acts = append(acts, a)
		}
		r, err := NewRule(table, 1, 0, []Cond{IP()}, acts...)
		if err != nil {
			if !errors.Is(err, ErrInvalidRule) {
				t.Fatalf("error %v does not wrap ErrInvalidRule", err)
			}
			return
		}
		p, err := ParseRule(r.String())
		if err != nil || !p.Equal(r) {
			t.Fatalf("%s does not parse back to the rule: %v", r, err)
		}
	})
}

// fuzzCT makes a ct action's arguments from 19 fuzzer bytes: flags,
// table, zone (or a zone field), a nat of any kind with any range, and
// an exec write of ct_mark or ct_label.
func fuzzCT(d []byte) *CT {
	c := &CT{Commit: d[1]&1 != 0, Force: d[1]&2 != 0, Recirc: d[1]&4 != 0, Table: d[5],
		Zone: binary.BigEndian.Uint16(d[2:])}
	if d[1]&8 != 0 {
		c.ZoneField = FieldRef{Field(d[15] % 20), d[16] % 70, d[17] % 70}
	}
	c.NAT = NAT{Kind: conntrack.NATKind(d[6] % 5), MinAddr: [4]byte(d[7:11]), MaxAddr: [4]byte(d[11:15]),
		MinPort: uint16(d[3]), MaxPort: uint16(d[4]) << 4, Persistent: d[18]&1 != 0, Hash: d[18]&2 != 0, Random: d[18]&4 != 0}
	if d[1]&16 != 0 {
		v := conntrack.Label{Hi: uint64(d[7]) << 60, Lo: uint64(binary.BigEndian.Uint32(d[9:]))}
		m := conntrack.Label{Hi: uint64(d[11]) << 56, Lo: uint64(binary.BigEndian.Uint32(d[13:]))}
		c.Exec = append(c.Exec, CTExec{Label: d[18]&8 != 0, Load: d[18]&16 != 0, Value: v, Mask: m})
	}
	return c
}
