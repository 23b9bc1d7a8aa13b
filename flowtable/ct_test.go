package flowtable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/conntrack"
)

// ctRules are connection-tracking rules in the canonical form Rule.String
// prints: what ovs-ofctl prints for them (ct_state's flags in bit order,
// ct_mark and ct_label in hex, nat before exec), gvs's order of items
// aside.
var ctRules = []string{
	"table=0, priority=100, ip, ct_state=-trk, actions=ct(table=1)",
	"table=1, priority=100, in_port=1, ip, ct_state=+new+trk, actions=ct(commit),output:2",
	"table=1, priority=100, ip, ct_state=-new+est-inv+trk, actions=output:2",
	"table=1, priority=100, ip, ct_state=new|trk, actions=drop",
	"table=1, priority=100, ip, ct_state=0, actions=drop",
	"table=1, priority=90, ip, ct_state=+rpl+trk, ct_zone=5, ct_mark=0x5/0xff, ct_label=0x1/0xff, actions=ct_clear,output:3",
	"table=1, priority=90, ct_mark=0, ct_label=0, actions=drop",
	"table=1, priority=90, ct_label=0x1000000000000000000000000000000f, actions=drop",
	"table=1, priority=90, ct_label=0x10000000000000000/0xffffffffffffffff0000000000000000, actions=drop",
	"table=1, priority=80, ip, ct_state=+new, ct_nw_src=10.0.0.1, ct_nw_dst=10.0.0.0/8, ct_nw_proto=6, ct_tp_src=80, ct_tp_dst=0x100/0xff00, actions=drop",
	"table=1, priority=80, ct_state=-inv+trk, ct_nw_proto=1, ct_tp_src=8, ct_tp_dst=0, actions=drop",
	"table=2, priority=10, tcp, actions=ct(commit,force,table=3,zone=7,nat(dst=10.0.0.1:80))",
	"table=2, priority=10, ip, actions=ct(commit,zone=NXM_NX_REG0[0..15],nat(src=10.0.0.1-10.0.0.5:100-200,persistent,random),exec(set_field:0x1/0xff->ct_mark,set_field:0x5->ct_label)),output:2",
	"table=2, priority=10, ip, actions=ct(commit,nat(src)),ct(table=4,nat),ct(),ct_clear",
	"table=2, priority=10, ip, actions=ct(commit,nat(src=10.0.0.1:1-100,hash))",
	"table=2, priority=10, ip, actions=ct(commit,exec(load:0x5->NXM_NX_CT_MARK[0..7],load:0x1->NXM_NX_CT_LABEL[60..70],load:0->NXM_NX_CT_LABEL[127],load:0x7->NXM_NX_CT_MARK[]))",
	"table=2, priority=10, ip, actions=ct(commit,exec(set_field:0x1000000000000000000000000000000f/0xffff00000000000000000000000000ff->ct_label,set_field:0/0->ct_mark))",
	"table=2, priority=10, dl_type=0x86dd, actions=ct(commit)",
	"table=2, priority=10, actions=ct_clear,output:1",
}

func TestCTParseRoundTrip(t *testing.T) {
	for _, s := range ctRules {
		r, err := ParseRule(s)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", s, err)
			continue
		}
		if out := r.String(); out != s {
			t.Errorf("String mismatch:\n in  %s\n out %s", s, out)
		}
		r2, err := ParseRule(r.String())
		if err != nil || !r.Equal(r2) {
			t.Errorf("round trip of %q: %v", s, err)
		}
	}
}

// TestCTParseVariants: other spellings ovs-ofctl accepts mean the same rule.
func TestCTParseVariants(t *testing.T) {
	cases := []parseCase{
		{"ct_state=+trk+new,ip actions=ct(commit),2", "table=0, priority=32768, ip, ct_state=+new+trk, actions=ct(commit),output:2"},
		{"ct_state=0x20/0x21 actions=drop", "table=0, priority=32768, ct_state=-new+trk, actions=drop"},
		{"ct_state=0x21 actions=drop", "table=0, priority=32768, ct_state=new|trk, actions=drop"},
		{"ct_state=0x21/0xff actions=drop", "table=0, priority=32768, ct_state=new|trk, actions=drop"},
		{"ct_state=trk|new|new actions=drop", "table=0, priority=32768, ct_state=new|trk, actions=drop"},
		{"ct_state=0/0 actions=drop", "table=0, priority=32768, actions=drop"},
		{"ct_state=-trk+new+est+rel+rpl+inv+snat+dnat actions=drop", "table=0, priority=32768, ct_state=new|est|rel|rpl|inv|snat|dnat, actions=drop"},
		{"ct_mark=5,ct_label=5 actions=drop", "table=0, priority=32768, ct_mark=0x5, ct_label=0x5, actions=drop"},
		{"ct_label=0x00000000000000000000000000000000001 actions=drop", "table=0, priority=32768, ct_label=0x1, actions=drop"},
		{"ct_label=0/0 actions=drop", "table=0, priority=32768, actions=drop"},
		{"ct_zone=0x10 actions=drop", "table=0, priority=32768, ct_zone=16, actions=drop"},
		{"ip,ct_state=+new,ct_nw_proto=6,ct_nw_src=0.0.0.0/0 actions=drop", "table=0, priority=32768, ip, ct_state=+new, ct_nw_proto=6, actions=drop"},
		{"ip actions=ct", "table=0, priority=32768, ip, actions=ct()"},
		{"ip actions=ct(zone=0),ct(zone=0x10),ct(exec())", "table=0, priority=32768, ip, actions=ct(),ct(zone=16),ct()"},
		{"ip actions=ct(force,commit,commit)", "table=0, priority=32768, ip, actions=ct(commit,force)"},
		{"ip actions=ct(table=1,table=2,zone=1,zone=2)", "table=0, priority=32768, ip, actions=ct(table=2,zone=2)"},
		{"ip actions=ct(zone=reg3[0..15])", "table=0, priority=32768, ip, actions=ct(zone=NXM_NX_REG3[0..15])"},
		{"ip actions=ct(commit,exec(set_field:5->ct_mark),nat(src=10.0.0.1))", "table=0, priority=32768, ip, actions=ct(commit,nat(src=10.0.0.1),exec(set_field:0x5->ct_mark))"},
		{"ip actions=ct(commit,nat(src=0.0.0.0))", "table=0, priority=32768, ip, actions=ct(commit,nat(src))"},
		{"ip actions=ct(commit,nat(src=10.0.0.1-10.0.0.1:5-5))", "table=0, priority=32768, ip, actions=ct(commit,nat(src=10.0.0.1:5))"},
		{"ip actions=ct(commit,nat(dst=10.0.0.1:1-9,random,persistent))", "table=0, priority=32768, ip, actions=ct(commit,nat(dst=10.0.0.1:1-9,persistent,random))"},
		{"ip actions=ct(commit,exec(set_field:0x3/0x1->ct_mark))", "table=0, priority=32768, ip, actions=ct(commit,exec(set_field:0x1/0x1->ct_mark))"},
		{"ip actions=ct(commit,exec(load:5->ct_mark[]))", "table=0, priority=32768, ip, actions=ct(commit,exec(load:0x5->NXM_NX_CT_MARK[]))"},
	}
	checkVariants(t, cases)
}

// TestCTParseErrors: what ovs-ofctl refuses is refused, with gvs's own
// additions noted.
func TestCTParseErrors(t *testing.T) {
	cases := []parseCase{
		{"ct_state=+trk+trk actions=drop", "only once"},
		{"ct_state=+trk-trk actions=drop", "only once"},
		{"ct_state=+TRK actions=drop", "unknown ct_state flag"},
		{"ct_state=+trk+bogus actions=drop", "unknown ct_state flag"},
		{"ct_state=+new|trk actions=drop", "unknown ct_state flag"},
		{"ct_state=+ actions=drop", "unknown ct_state flag"},
		{"ct_state=0x100/0x100 actions=drop", "unknown ct_state flag"},
		{"ct_state=0x20/0x1ff actions=drop", "unknown ct_state flag"},
		{"ct_state=+new+trk/0xff actions=drop", "unknown ct_state flag"},
		{"ct_state= actions=drop", "missing"},
		{"ct_state=+trk, ct_state=+new actions=drop", "conflicts"}, // ovs-ofctl: the later wins; gvs refuses, as for every field
		{"ct_zone=5/0xff actions=drop", "not maskable"},
		{"ct_zone=65536 actions=drop", "16 bits"},
		{"ct_mark=0x100000000 actions=drop", "32 bits"},
		{"ct_label=0x1000000000000000000000000000000000 actions=drop", "128 bits"},
		{"ct_label=18446744073709551616 actions=drop", "bad number"},
		{"ct_nw_proto=6/0xf actions=drop", "not maskable"},
		{"ip, ct_state=+trk, ct_nw_src=10.0.0.1 actions=drop", "requires a tracked connection"},
		{"ip, ct_state=-inv, ct_nw_proto=6 actions=drop", "requires a tracked connection"},
		{"ip, ct_state=+inv, ct_nw_proto=6 actions=drop", "requires a tracked connection"},
		{"ct_state=+new, ct_nw_src=10.0.0.1 actions=drop", "requires ip"},
		{"arp, ct_state=+rpl, ct_nw_dst=10.0.0.1 actions=drop", "requires ip"},
		{"ip, ct_state=+new, ct_tp_src=80 actions=drop", "requires ct_nw_proto"}, // ovs-ofctl drops the field silently
		{"actions=ct(table=1)", "ct requires ip"},
		{"arp actions=ct(commit)", "ct requires ip"},
		{"ip actions=ct(force)", `"force" requires "commit"`},
		{"ip actions=ct(exec(set_field:5->ct_mark))", `exec requires "commit"`},
		{"ip actions=ct(nat(src=10.0.0.1))", `require "commit"`},
		{"ip actions=ct(nat(dst))", `require "commit"`},
		{"ip actions=ct(zone=70000)", "bad zone"},
		{"ip actions=ct(zone=NXM_NX_REG0[0..7])", "not 16"},
		{"ip actions=ct(zone=NXM_NX_REG0[])", "not 16"},
		{"ip actions=ct(zone=NXM_NX_REG9[0..15])", "unknown field"},
		{"ip actions=ct(table=255)", "0-254"},
		{"ip actions=ct(table=x)", "bad table"},
		{"ip actions=ct(commit,alg=ftp)", "not supported"},
		{"ip actions=ct(commit,bogus)", "unknown ct argument"},
		{"ip actions=ct(commit,)", "empty ct argument"},
		{"ip actions=ct(commit", "unbalanced"},
		{"ip actions=ct(commit,nat,nat)", "twice"},
		{"ip actions=ct(commit,nat(src=10.0.0.9-10.0.0.1))", "reversed"},
		{"ip actions=ct(commit,nat(src=10.0.0.1:200-100))", "reversed"},
		{"ip actions=ct(commit,nat(src=10.0.0.1:0-100))", "bad port"},
		{"ip actions=ct(commit,nat(src=10.0.0.1:65536))", "bad port"}, // ovs-ofctl drops it silently
		{"ip actions=ct(commit,nat(src=0.0.0.0-10.0.0.5))", "first address"},
		{"ip actions=ct(commit,nat(src=0.0.0.0:100-200))", "first address"},
		{"ip actions=ct(commit,nat(src=10.0.0.1:1-100,random,hash))", "exclude each other"},
		{"ip actions=ct(commit,nat(src=10.0.0.1,dst=10.0.0.2))", "only one of"},
		{"ip actions=ct(commit,nat(persistent))", "only with"},
		{"ip actions=ct(commit,nat(src=[fd00::1]))", "IPv6"},
		{"ip actions=ct(commit,nat(src=fd00::1))", "bad IPv4"},
		{"ip actions=ct(commit,nat(src=10.0.0.1,frob))", "unknown argument"},
		{"ip actions=ct(commit,exec(set_field:5->reg0))", "only ct_mark and ct_label"},
		{"ip actions=ct(commit,exec(output:1))", "only set_field or load"},
		{"ip actions=ct(commit,exec(move:NXM_NX_REG0[]->NXM_NX_CT_MARK[]))", "only set_field or load"},
		{"ip actions=ct(commit,exec(nat))", "only set_field or load"},
		{"ip actions=ct(commit,exec(set_field:0x100000000->ct_mark))", "32 bits"},
		{"ip actions=ct(commit,exec(set_field:1/0x100000000->ct_mark))", "32 bits"},
		{"ip actions=ct(commit,exec(load:0x100->NXM_NX_CT_MARK[0..7]))", "does not fit"},
		{"ip actions=ct(commit,exec(load:1->NXM_NX_CT_MARK[0..32]))", "out of"},
		{"ip actions=ct(commit,exec(load:1->NXM_NX_CT_LABEL[0..128]))", "out of"},
		{"ip actions=ct(commit,exec(load:1->NXM_NX_CT_ZONE[]))", "only ct_mark and ct_label"},
		{"ip actions=ct_clear:1", "unknown or unsupported action"},
	}
	checkParseErrors(t, cases)
}

// ctTyped are connection-tracking rules built in Go with the text that
// means the same rule; together they use every ct constructor.
var ctTyped = []struct {
	match   []Cond
	actions []Action
	text    string
}{
	{[]Cond{IP(), CtState(0, conntrack.StateTrk)}, []Action{Ct(CT{Recirc: true, Table: 1})},
		"table=0, priority=100, ip, ct_state=-trk, actions=ct(table=1)"},
	{[]Cond{InPort(1), IP(), CtState(conntrack.StateTrk|conntrack.StateNew, 0)}, []Action{Ct(CT{Commit: true}), OutputPort(2)},
		"table=0, priority=100, in_port=1, ip, ct_state=+new+trk, actions=ct(commit),output:2"},
	{[]Cond{IP(), CtStateMasked(conntrack.StateTrk|conntrack.StateNew, 0xff)}, nil,
		"table=0, priority=100, ip, ct_state=new|trk, actions=drop"},
	{[]Cond{IP(), CtState(conntrack.StateTrk|conntrack.StateRpl, 0), CtZone(5), CtMarkMasked(0x105, 0xff), CtLabelMasked(conntrack.Label{Lo: 0x101}, conntrack.Label{Lo: 0xff})},
		[]Action{CtClear(), OutputPort(3)},
		"table=0, priority=100, ip, ct_state=+rpl+trk, ct_zone=5, ct_mark=0x5/0xff, ct_label=0x1/0xff, actions=ct_clear,output:3"},
	{[]Cond{CtMark(0), CtLabel(conntrack.Label{})}, nil, "table=0, priority=100, ct_mark=0, ct_label=0, actions=drop"},
	{[]Cond{CtLabelMasked(conntrack.Label{Hi: 1, Lo: 7}, conntrack.Label{Hi: ^uint64(0)})}, nil,
		"table=0, priority=100, ct_label=0x10000000000000000/0xffffffffffffffff0000000000000000, actions=drop"},
	{[]Cond{IP(), CtState(conntrack.StateNew, 0), CtNwSrc(netip.MustParseAddr("10.0.0.1")), CtNwDstPrefix(pfx("10.0.0.0/8")), CtNwProto(6), CtTpSrc(80), CtTpDstMasked(0x1234, 0xff00)}, nil,
		"table=0, priority=100, ip, ct_state=+new, ct_nw_src=10.0.0.1, ct_nw_dst=10.0.0.0/8, ct_nw_proto=6, ct_tp_src=80, ct_tp_dst=0x1200/0xff00, actions=drop"},
	{[]Cond{IP(), CtState(conntrack.StateNew, 0), CtNwSrcPrefix(pfx("10.1.0.0/16")), CtNwDst(netip.MustParseAddr("10.0.0.2")), CtNwProto(17), CtTpSrcMasked(0x100, 0xff00), CtTpDst(53)}, nil,
		"table=0, priority=100, ip, ct_state=+new, ct_nw_src=10.1.0.0/16, ct_nw_dst=10.0.0.2, ct_nw_proto=17, ct_tp_src=0x100/0xff00, ct_tp_dst=53, actions=drop"},
	{[]Cond{TCP()}, []Action{Ct(CT{Commit: true, Force: true, Recirc: true, Table: 3, Zone: 7, NAT: DstNAT(netip.MustParseAddr("10.0.0.1"), netip.Addr{}, 80, 0)})},
		"table=0, priority=100, tcp, actions=ct(commit,force,table=3,zone=7,nat(dst=10.0.0.1:80))"},
	{[]Cond{IP()}, []Action{Ct(CT{Commit: true, ZoneField: FieldReg0.Bits(0, 15),
		NAT:  NAT{Kind: conntrack.NATSrc, MinAddr: [4]byte{10, 0, 0, 1}, MaxAddr: [4]byte{10, 0, 0, 5}, MinPort: 100, MaxPort: 200, Persistent: true, Random: true},
		Exec: []CTExec{SetCtMark(0x101, 0xff), SetCtLabel(conntrack.Label{Lo: 5}, conntrack.Label{Hi: ^uint64(0), Lo: ^uint64(0)})}}), OutputPort(2)},
		"table=0, priority=100, ip, actions=ct(commit,zone=NXM_NX_REG0[0..15],nat(src=10.0.0.1-10.0.0.5:100-200,persistent,random),exec(set_field:0x1/0xff->ct_mark,set_field:0x5->ct_label)),output:2"},
	{[]Cond{IP()}, []Action{Ct(CT{Commit: true, NAT: SrcNAT(netip.Addr{}, netip.Addr{}, 0, 0)}), Ct(CT{Recirc: true, Table: 4, NAT: BareNAT()}), Ct(CT{}), CtClear()},
		"table=0, priority=100, ip, actions=ct(commit,nat(src)),ct(table=4,nat),ct(),ct_clear"},
	{[]Cond{IP()}, []Action{Ct(CT{Commit: true, NAT: SrcNAT(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.1"), 5, 5)})},
		"table=0, priority=100, ip, actions=ct(commit,nat(src=10.0.0.1:5))"},
	{[]Cond{IP()}, []Action{Ct(CT{Commit: true, Exec: []CTExec{{Load: true, Value: conntrack.Label{Lo: 5}, Mask: conntrack.Label{Lo: 0xff}}}})},
		"table=0, priority=100, ip, actions=ct(commit,exec(load:0x5->NXM_NX_CT_MARK[0..7]))"},
	{[]Cond{EthType(0x86dd)}, []Action{Ct(CT{Commit: true})}, "table=0, priority=100, dl_type=0x86dd, actions=ct(commit)"},
}

// TestCTTypedEqualsParsed: the ct constructors make the rules their text
// parses to, and print that text.
func TestCTTypedEqualsParsed(t *testing.T) {
	for _, c := range ctTyped {
		r, err := NewRule(0, 100, 0, c.match, c.actions...)
		if err != nil {
			t.Errorf("NewRule for %q: %v", c.text, err)
			continue
		}
		p, err := ParseRule(c.text)
		if err != nil {
			t.Fatalf("ParseRule(%q): %v", c.text, err)
		}
		if !r.Equal(p) {
			t.Errorf("typed and parsed rules differ:\n typed  %s\n parsed %s", r, p)
		}
		if got := r.String(); got != c.text {
			t.Errorf("String:\n got  %s\n want %s", got, c.text)
		}
	}
}

// TestCTTypedRefused: a ct rule the parser refuses is refused when built
// in Go too, with an error wrapping ErrInvalidRule.
func TestCTTypedRefused(t *testing.T) {
	ip := []Cond{IP()}
	a1 := netip.MustParseAddr("10.0.0.1")
	cases := []struct {
		name    string
		match   []Cond
		actions []Action
		want    string
	}{
		{"flag set and clear", []Cond{CtState(conntrack.StateTrk, conntrack.StateTrk)}, nil, "both set and clear"},
		{"unknown flag", []Cond{CtStateMasked(0x100, 0x100)}, nil, "unknown ct_state"},
		{"ct_nw_src without a connection", []Cond{IP(), CtState(conntrack.StateTrk, 0), CtNwSrc(a1)}, nil, "tracked connection"},
		{"ct_nw_dst without ip", []Cond{CtState(conntrack.StateNew, 0), CtNwDst(a1)}, nil, "requires ip"},
		{"ct_tp_dst without ct_nw_proto", []Cond{IP(), CtState(conntrack.StateNew, 0), CtTpDst(80)}, nil, "ct_nw_proto"},
		{"ct_nw_src IPv6", []Cond{IP(), CtState(conntrack.StateNew, 0), CtNwSrc(netip.MustParseAddr("fd00::1"))}, nil, "not an IPv4"},
		{"ct without ip", nil, []Action{Ct(CT{})}, "ct requires ip"},
		{"ct nil", ip, []Action{{Kind: ActCT}}, "without its arguments"},
		{"force without commit", ip, []Action{Ct(CT{Force: true})}, "requires \"commit\""},
		{"exec without commit", ip, []Action{Ct(CT{Exec: []CTExec{SetCtMark(1, 1)}})}, "requires \"commit\""},
		{"nat range without commit", ip, []Action{Ct(CT{NAT: SrcNAT(a1, netip.Addr{}, 0, 0)})}, "require \"commit\""},
		{"table without Recirc", ip, []Action{Ct(CT{Table: 3})}, "without Recirc"},
		{"table 255", ip, []Action{Ct(CT{Recirc: true, Table: 255})}, "255"},
		{"zone field of 8 bits", ip, []Action{Ct(CT{ZoneField: FieldReg0.Bits(0, 7)})}, "not 16"},
		{"zone field outside", ip, []Action{Ct(CT{ZoneField: FieldInPort.Bits(8, 23)})}, "outside"},
		{"zone number and field", ip, []Action{Ct(CT{Zone: 1, ZoneField: FieldReg0.Bits(0, 15)})}, "both"},
		{"nat IPv6", ip, []Action{Ct(CT{Commit: true, NAT: SrcNAT(netip.MustParseAddr("fd00::1"), netip.Addr{}, 0, 0)})}, "not an IPv4"},
		{"nat reversed", ip, []Action{Ct(CT{Commit: true, NAT: DstNAT(netip.MustParseAddr("10.0.0.9"), a1, 0, 0)})}, "reversed"},
		{"nat ports reversed", ip, []Action{Ct(CT{Commit: true, NAT: DstNAT(a1, netip.Addr{}, 9, 3)})}, "reversed"},
		{"nat port range from 0", ip, []Action{Ct(CT{Commit: true, NAT: DstNAT(a1, netip.Addr{}, 0, 3)})}, "start at 0"},
		{"nat ports without address", ip, []Action{Ct(CT{Commit: true, NAT: SrcNAT(netip.Addr{}, netip.Addr{}, 1, 3)})}, "first address"},
		{"nat hash and random", ip, []Action{Ct(CT{Commit: true, NAT: NAT{Kind: conntrack.NATSrc, MinAddr: [4]byte{1, 2, 3, 4}, Hash: true, Random: true}})}, "exclude"},
		{"bare nat with a range", ip, []Action{Ct(CT{NAT: NAT{Kind: conntrack.NATBare, MinAddr: [4]byte{1, 2, 3, 4}}})}, "need \"src\""},
		{"nat kind", ip, []Action{Ct(CT{Commit: true, NAT: NAT{Kind: 9}})}, "unknown kind"},
		{"exec mark of 33 bits", ip, []Action{Ct(CT{Commit: true, Exec: []CTExec{{Value: conntrack.Label{Lo: 1 << 32}, Mask: conntrack.Label{Lo: 1 << 32}}}})}, "32 bits"},
		{"exec load of two runs", ip, []Action{Ct(CT{Commit: true, Exec: []CTExec{{Load: true, Mask: conntrack.Label{Lo: 0x101}}}})}, "one run"},
		{"exec load of nothing", ip, []Action{Ct(CT{Commit: true, Exec: []CTExec{{Load: true}}})}, "no bits"},
	}
	for _, c := range cases {
		r, err := NewRule(0, 1, 0, c.match, c.actions...)
		if err == nil {
			t.Errorf("%s: NewRule accepted %s", c.name, r)
			continue
		}
		if !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewRule error %q, want ErrInvalidRule and %q", c.name, err, c.want)
		}
	}
}

// TestCTTypedCopies: Ct copies its CT, exec list included.
func TestCTTypedCopies(t *testing.T) {
	c := CT{Commit: true, Exec: []CTExec{SetCtMark(1, 0xffffffff)}}
	a := Ct(c)
	c.Exec[0] = SetCtMark(9, 0xffffffff)
	c.Commit = false
	r, err := NewRule(0, 1, 0, []Cond{IP()}, a)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.String(); got != "table=0, priority=1, ip, actions=ct(commit,exec(set_field:0x1->ct_mark))" {
		t.Errorf("the rule changed with the caller's CT: %s", got)
	}
}

// TestCTCompiled: the tracker's form of a ct action combines exec's
// writes in order, as OVS applies them one after the other.
func TestCTCompiled(t *testing.T) {
	r, err := ParseRule("ip actions=ct(commit,zone=3,nat(dst=10.0.0.1-10.0.0.3:80-90,random),exec(set_field:0x1/0xf->ct_mark,set_field:0x20/0xf0->ct_mark,load:1->NXM_NX_CT_LABEL[64],set_field:0x2/0x3->ct_label))")
	if err != nil {
		t.Fatal(err)
	}
	got := *r.Actions[0].CT.Action()
	want := conntrack.Action{Zone: 3, Commit: true,
		NAT:     conntrack.NAT{Kind: conntrack.NATDst, MinAddr: [4]byte{10, 0, 0, 1}, MaxAddr: [4]byte{10, 0, 0, 3}, MinPort: 80, MaxPort: 90, Random: true},
		SetMark: true, Mark: 0x21, MarkMask: 0xff,
		SetLabel: true, Label: conntrack.Label{Hi: 1, Lo: 2}, LabelMask: conntrack.Label{Hi: 1, Lo: 3}}
	if got != want {
		t.Errorf("compiled action\n got  %+v\n want %+v", got, want)
	}
}

// TestCTPipeline: the pipeline records ct steps with the outputs before
// them, the zone (from a register when so written) and the metadata a
// recirculation resumes with; it clears the ct_* fields after each; a
// run that only recirculates is no drop; RunFrom starts in the given
// table; too many ct actions drop.
func TestCTPipeline(t *testing.T) {
	tbl := newTable(t,
		"table=0, priority=10, ip, ct_state=-trk, actions=load:0x7->NXM_NX_REG1[],output:5,set_field:0a:00:00:00:00:01->eth_dst,ct(zone=NXM_NX_REG1[0..15],table=2),resubmit(,1),output:6",
		"table=1, priority=10, ip, ct_state=0, actions=load:0x9->NXM_NX_REG2[]",
		"table=0, priority=20, ip, ct_state=+est+trk, actions=ct_clear,resubmit(,1),output:7",
		"table=2, priority=10, ip, ct_state=+new+trk, ct_zone=7, actions=ct(table=3)",
		"table=4, priority=10, ip, actions=ct(),ct(),ct(),ct(),ct(),output:1",
	)
	s := tbl.Snapshot()
	if !s.HasConntrack() {
		t.Fatal("HasConntrack is false")
	}
	f := Fields{InPort: 1, EthType: 0x0800, NwProto: 17}
	var v Verdict
	s.Run(&f, &v)
	if v.NOut != 2 || v.NCT != 1 || v.Drop != DropNone {
		t.Fatalf("verdict: %d outputs, %d ct steps, drop %v", v.NOut, v.NCT, v.Drop)
	}
	st := v.CT[0]
	if st.At != 1 || st.Zone != 7 || !st.CT.Recirc || st.CT.Table != 2 || st.Regs[1] != 7 || st.Regs[2] != 0 ||
		!st.SetEthDst || st.EthDst != [6]byte{0x0a, 0, 0, 0, 0, 1} {
		t.Fatalf("ct step %+v", st)
	}
	if f.Regs[2] != 9 {
		t.Fatal("after ct the packet did not go on untracked (ct_state=0 in table 1 did not match)")
	}
	// A recirculation: the ct_* fields set, from table 2; it only
	// recirculates again, which is no drop.
	var m conntrack.Meta
	m.State, m.Zone = conntrack.StateTrk|conntrack.StateNew, 7
	g := Fields{InPort: 1, EthType: 0x0800, NwProto: 17, Regs: st.Regs}
	g.SetConntrack(&m)
	s.RunFrom(2, &g, &v)
	if v.NOut != 0 || v.NCT != 1 || v.Drop != DropNone || !v.Recirculates() || g.CtState != 0 {
		t.Fatalf("recirculation: %d outputs, %d steps, drop %v, ct_state after %v", v.NOut, v.NCT, v.Drop, g.CtState)
	}
	// ct_clear clears what the packet came in with.
	h := Fields{InPort: 1, EthType: 0x0800, CtState: conntrack.StateTrk | conntrack.StateEst}
	s.Run(&h, &v)
	if v.NOut != 1 || v.NCT != 1 || v.CT[0].CT != nil || h.Regs[2] != 9 {
		t.Fatalf("ct_clear: %d outputs, %d steps (first %+v), reg2 %d", v.NOut, v.NCT, v.CT[0], h.Regs[2])
	}
	k := Fields{EthType: 0x0800}
	s.RunFrom(4, &k, &v)
	if v.NOut != 0 || v.NCT != 0 || v.Drop != DropTooManyCT || v.Table != 4 {
		t.Fatalf("five ct actions: %d outputs, %d steps, drop %v in %d", v.NOut, v.NCT, v.Drop, v.Table)
	}
}

// TestCTCache: the cache keys on the start table and the ct_* fields,
// and gives back the ct steps of the run it kept, so that a hit skips no
// ct action.
func TestCTCache(t *testing.T) {
	tbl := newTable(t,
		"table=0, priority=10, ip, actions=ct(table=1)",
		"table=1, priority=10, ip, ct_state=+new+trk, actions=ct(commit),output:2",
		"table=1, priority=10, ip, ct_state=+est+trk, actions=output:3",
	)
	s := tbl.Snapshot()
	c := NewCache(64)
	var v Verdict
	run := func(start uint8, st conntrack.State) (bool, Verdict) {
		f := Fields{InPort: 1, EthType: 0x0800, CtState: st}
		hit := c.RunFrom(s, start, &f, &v)
		return hit, v
	}
	if hit, v := run(0, 0); hit || v.NCT != 1 {
		t.Fatalf("first pass: hit %v, %d steps", hit, v.NCT)
	}
	if hit, v := run(0, 0); !hit || v.NCT != 1 || !v.CT[0].CT.Recirc {
		t.Fatalf("first pass again: hit %v, steps %+v", hit, v.CT[:v.NCT])
	}
	if hit, v := run(1, conntrack.StateTrk|conntrack.StateNew); hit || v.NCT != 1 || v.Outputs[0].Port != 2 {
		t.Fatalf("+new from table 1: hit %v, %d steps, port %d (the key must hold the start table)", hit, v.NCT, v.Outputs[0].Port)
	}
	if hit, v := run(1, conntrack.StateTrk|conntrack.StateNew); !hit || v.NCT != 1 || !v.CT[0].CT.Commit {
		t.Fatalf("+new from table 1 again: hit %v, steps %+v", hit, v.CT[:v.NCT])
	}
	if hit, v := run(1, conntrack.StateTrk|conntrack.StateEst); hit || v.NCT != 0 || v.Outputs[0].Port != 3 {
		t.Fatalf("+est from table 1: hit %v, %d steps, port %d (the key must hold ct_state)", hit, v.NCT, v.Outputs[0].Port)
	}
}

// TestCTTrace: a trace shows each ct step, what the tracker has (found
// by Peek, which changes nothing), the recirculation with the state it
// resumes with, and --ct-next overrides.
func TestCTTrace(t *testing.T) {
	tbl := newTable(t,
		"table=0, priority=10, ip, ct_state=-trk, actions=ct(zone=5,nat,table=1)",
		"table=1, priority=10, ip, ct_state=+new+trk, actions=ct(commit,zone=5,nat(src=10.0.0.100)),output:2",
		"table=1, priority=10, ip, ct_state=+est+trk, actions=output:3",
		"table=1, priority=20, ip, ct_state=+est+rpl+trk, actions=output:1",
	)
	s := tbl.Snapshot()
	f, err := ParseFields("in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_src=4000,tp_dst=53")
	if err != nil {
		t.Fatal(err)
	}
	checkContains(t, s.Trace(f).String(),
		" 0. ip,ct_state=-trk, priority 10\n    ct(table=1,zone=5,nat)\n     -> A clone of the packet is forked to recirculate. The forked pipeline will be resumed at table 1 (recirc(1)).\n     -> Sets the packet to an untracked state, and clears all the conntrack fields.\n",
		"Datapath actions: ct(zone=5,nat),recirc(1)\n",
		"recirc(1) - resume conntrack with default ct_state=new|trk (use --ct-next to customize)\n",
		"Flow: in_port=1,udp,ct_state=new|trk,ct_zone=5,nw_src=10.0.0.1",
		"    thaw\n        Resuming from table 1\n 1. ip,ct_state=+new+trk, priority 10\n    ct(commit,zone=5,nat(src=10.0.0.100))\n",
		"Datapath actions: ct(commit,zone=5,nat(src=10.0.0.100)),2\n",
	)
	// With the tracker: the connection committed and answered is found
	// in its reply direction; the reply is traced translated back.
	tr, err := conntrack.New(conntrack.Config{MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	a := conntrack.Action{Zone: 5, Commit: true, NAT: conntrack.NAT{Kind: conntrack.NATSrc, MinAddr: [4]byte{10, 0, 0, 100}}}
	var m conntrack.Meta
	tr.Process(tr.Now(), udpPacket([4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}, 4000, 53), conntrack.CsumVerified, &a, &m)
	before := tr.Stats()
	rf, _ := ParseFields("in_port=2,udp,nw_src=10.0.0.2,nw_dst=10.0.0.100,tp_src=53,tp_dst=4000")
	checkContains(t, s.TraceWith(rf, TraceOptions{Conntrack: tr}).String(),
		"-> tracker, zone 5: found udp,orig=(src=10.0.0.1,dst=10.0.0.2,sport=4000,dport=53),reply=(src=10.0.0.2,dst=10.0.0.100,sport=53,dport=4000),zone=5 (reply direction): ct_state=est|rpl|trk|dnat\n",
		"recirc(1) - resume conntrack with ct_state=est|rpl|trk|dnat (from the tracker, zone 5)\n",
		"Simulated NAT: src=10.0.0.2,dst=10.0.0.100,sport=53,dport=4000 -> src=10.0.0.2,dst=10.0.0.1,sport=53,dport=4000\n",
		"ct_nw_src=10.0.0.1,ct_nw_dst=10.0.0.2,ct_nw_proto=17,ct_tp_src=4000,ct_tp_dst=53,",
		" 1. ip,ct_state=+est+rpl+trk, priority 20\n    output:1\n",
	)
	if after := tr.Stats(); !reflect.DeepEqual(after, before) {
		t.Errorf("tracing changed the tracker: %+v -> %+v", before, after)
	}
	// --ct-next wins over the tracker.
	out := s.TraceWith(rf, TraceOptions{Conntrack: tr, CTNext: []conntrack.State{conntrack.StateTrk | conntrack.StateEst}}).String()
	if !strings.Contains(out, "recirc(1) - resume conntrack with ct_state=est|trk (from --ct-next)\n") || !strings.Contains(out, "    output:3\n") {
		t.Errorf("--ct-next trace:\n%s", out)
	}
	// A recirculation loop is cut at MaxRecirc.
	loop := newTable(t, "table=0, priority=1, ip, actions=ct(table=0)").Snapshot().Trace(Fields{EthType: 0x0800})
	if n := len(loop.Recirc); n != MaxRecirc+1 || !loop.Recirc[n-1].Drop || !strings.Contains(loop.String(), "Recirculated more than 8 times: dropped.") {
		t.Errorf("loop trace has %d recirculations:\n%s", n, loop.String())
	}
}

// checkContains reports each of wants that out lacks.
func checkContains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("lacks %q:\n%s", w, out)
		}
	}
}

// udpPacket is an IPv4/UDP packet (no link layer, no UDP checksum).
func udpPacket(src, dst [4]byte, sport, dport uint16) []byte {
	b := make([]byte, 28)
	b[0], b[8], b[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(b[2:], 28)
	copy(b[12:], src[:])
	copy(b[16:], dst[:])
	binary.BigEndian.PutUint16(b[20:], sport)
	binary.BigEndian.PutUint16(b[22:], dport)
	binary.BigEndian.PutUint16(b[24:], 8)
	return b
}

// TestParseCTState: the --ct-next syntax.
func TestParseCTState(t *testing.T) {
	for in, want := range map[string]conntrack.State{
		"trk|est": conntrack.StateTrk | conntrack.StateEst, "+trk+new": conntrack.StateTrk | conntrack.StateNew,
		"0x21": conntrack.StateTrk | conntrack.StateNew, "0": 0,
	} {
		if got, err := ParseCTState(in); err != nil || got != want {
			t.Errorf("ParseCTState(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "bogus", "trk-new", "0x20/0x21", "0x100"} {
		if _, err := ParseCTState(in); err == nil {
			t.Errorf("ParseCTState(%q) accepted", in)
		}
	}
}

// ctCondMenu extends condMenu (FuzzTypedMatchesText) with the ct fields.
var ctCondMenu = []func(a uint64, b uint64) (Cond, string){
	func(a, b uint64) (Cond, string) {
		v, m := conntrack.State(a&0xff), conntrack.State(b&0xff)
		return CtStateMasked(v, m), fmt.Sprintf("ct_state=%#x/%#x", uint8(v), uint8(m))
	},
	func(a, _ uint64) (Cond, string) { return CtZone(uint16(a)), fmt.Sprintf("ct_zone=%d", uint16(a)) },
	func(a, b uint64) (Cond, string) {
		return CtMarkMasked(uint32(a), uint32(b)), fmt.Sprintf("ct_mark=%#x/%#x", uint32(a), uint32(b))
	},
	func(a, b uint64) (Cond, string) {
		l, m := conntrack.Label{Hi: a, Lo: b}, conntrack.Label{Hi: b, Lo: a}
		return CtLabelMasked(l, m), fmt.Sprintf("ct_label=0x%016x%016x/0x%016x%016x", a, b, b, a)
	},
	func(a, b uint64) (Cond, string) {
		p := netip.PrefixFrom(addr4(a), int(b%33))
		return CtNwSrcPrefix(p), "ct_nw_src=" + p.String()
	},
	func(a, _ uint64) (Cond, string) { return CtNwDst(addr4(a)), "ct_nw_dst=" + addr4(a).String() },
	func(a, _ uint64) (Cond, string) { return CtNwProto(uint8(a)), fmt.Sprintf("ct_nw_proto=%d", uint8(a)) },
	func(a, b uint64) (Cond, string) {
		return CtTpSrcMasked(uint16(a), uint16(b)), fmt.Sprintf("ct_tp_src=%#x/%#x", uint16(a), uint16(b))
	},
	func(a, _ uint64) (Cond, string) { return CtTpDst(uint16(a)), fmt.Sprintf("ct_tp_dst=%d", uint16(a)) },
	func(_, _ uint64) (Cond, string) {
		return CtState(conntrack.StateTrk|conntrack.StateEst, 0), "ct_state=+trk+est"
	},
}
