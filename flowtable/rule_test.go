package flowtable

import (
	"errors"
	"strings"
	"testing"
)

// specRules are the rule shapes of the OpenShift program
// (docs/openshift-rules.md), in
// the forms the node agent and ovs-ofctl users write them.
var specRules = []string{
	// table 0: dispatch
	"table=0, priority=250, in_port=2, ip, nw_dst=224.0.0.0/4, actions=drop",
	"table=0, priority=200, in_port=1, arp, nw_src=10.128.0.0/14, nw_dst=10.128.0.0/23, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10",
	"table=0, priority=200, in_port=1, ip, nw_src=10.128.0.0/14, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10",
	"table=0, priority=200, in_port=1, ip, nw_dst=10.128.0.0/14, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10",
	"table=0, priority=200, in_port=2, arp, nw_src=10.128.0.1, nw_dst=10.128.0.0/14, actions=goto_table:30",
	"table=0, priority=200, in_port=2, ip, actions=goto_table:30",
	"table=0, priority=150, in_port=2, ip, nw_src=10.128.0.0/23, actions=goto_table:25",
	"table=0, priority=150, in_port=1, actions=drop",
	"table=0, priority=100, arp, actions=goto_table:20",
	"table=0, priority=100, ip, actions=goto_table:20",
	"table=0, priority=0, actions=drop",
	// table 10: known nodes
	"table=10, priority=100, cookie=0xa0a0002, tun_src=10.0.0.2, actions=goto_table:30",
	// table 20: per-pod anti-spoofing
	"table=20, priority=100, in_port=3, arp, nw_src=10.128.0.3, arp_sha=0a:58:0a:80:00:03, actions=load:0x5->NXM_NX_REG0[],goto_table:30",
	"table=20, priority=100, in_port=3, arp, nw_src=10.128.0.3, arp_sha=00:00:00:80:00:03/00:00:00:ff:ff:ff, actions=load:0x5->NXM_NX_REG0[],goto_table:30",
	"table=20, priority=100, in_port=3, ip, nw_src=10.128.0.3, actions=load:0x5->NXM_NX_REG0[],goto_table:27",
	"table=20, priority=300, udp, tp_dst=4789, actions=drop",
	"table=25, priority=100, ip, nw_src=10.128.0.3, actions=load:0x5->NXM_NX_REG0[],goto_table:27",
	"table=27, priority=0, actions=goto_table:30",
	"table=30, priority=0, actions=goto_table:31",
	// table 31: route
	"table=31, priority=300, arp, nw_dst=10.128.0.1, actions=output:2",
	"table=31, priority=300, ip, nw_dst=10.128.0.1, actions=output:2",
	"table=31, priority=200, arp, nw_dst=10.128.0.0/23, actions=goto_table:40",
	"table=31, priority=200, ip, nw_dst=10.128.0.0/23, actions=goto_table:70",
	"table=31, priority=100, arp, nw_dst=10.128.0.0/14, actions=goto_table:50",
	"table=31, priority=100, ip, nw_dst=10.128.0.0/14, actions=goto_table:90",
	"table=31, priority=100, ip, nw_dst=172.30.0.0/16, actions=goto_table:60",
	"table=31, priority=50, ip, nw_dst=224.0.0.0/4, actions=goto_table:110",
	"table=31, priority=0, ip, actions=goto_table:99",
	"table=40, priority=100, arp, nw_dst=10.128.0.3, actions=output:3",
	"table=50, priority=100, cookie=0xa0a0002, arp, nw_dst=10.129.0.0/23, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:10.0.0.2->tun_dst,output:1",
	"table=60, priority=200, ip, nw_dst=172.30.0.0/16, actions=output:2",
	"table=70, priority=100, ip, nw_dst=10.128.0.3, actions=load:0x5->NXM_NX_REG1[],load:0x3->NXM_NX_REG2[],goto_table:80",
	// table 80: isolation
	"table=80, priority=300, ip, nw_src=10.128.0.1, actions=output:NXM_NX_REG2[]",
	"table=80, priority=200, reg0=0, actions=output:NXM_NX_REG2[]",
	"table=80, priority=200, reg1=0, actions=output:NXM_NX_REG2[]",
	"table=80, priority=100, reg0=5, reg1=5, actions=output:NXM_NX_REG2[]",
	"table=80, priority=100, reg0=0x10/0xf0, actions=output:NXM_NX_REG2[0..15]",
	"table=90, priority=100, cookie=0xa0a0002, ip, nw_dst=10.129.0.0/23, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:10.0.0.2->tun_dst,output:1",
	"table=99, priority=200, udp, nw_dst=10.0.0.1, tp_dst=53, actions=output:2",
	"table=99, priority=200, tcp, nw_dst=10.0.0.1, tp_dst=53, actions=output:2",
	"table=99, priority=0, actions=goto_table:100",
	"table=100, priority=100, ip, reg0=5, nw_dst=8.8.8.0/24, actions=drop",
	"table=100, priority=0, actions=goto_table:101",
	"table=101, priority=0, actions=output:2",
	"table=110, priority=100, reg0=5, actions=resubmit(,111),resubmit(,120)",
	"table=120, priority=100, ip, tun_id=0x5, nw_dst=224.1.2.3, actions=output:4,output:5,in_port",
	"table=253, priority=0, actions=note:01.ff",
	// other shapes
	"table=5, priority=10, dl_src=0a:58:00:00:00:00/ff:ff:00:00:00:00, dl_dst=ff:ff:ff:ff:ff:ff, actions=output:7",
	"table=5, priority=10, tcp, tp_src=0x1000/0xf000, tp_dst=80, actions=output:7",
	"table=5, priority=10, sctp, tp_dst=9, actions=output:7",
	"table=5, priority=10, icmp, icmp_type=8, icmp_code=0, actions=output:7",
	"table=5, priority=10, arp, arp_op=1, arp_tha=00:00:00:00:00:00, actions=output:7",
	"table=5, priority=10, ip, nw_proto=47, actions=output:7",
	"table=5, priority=10, dl_type=0x86dd, actions=output:7",
	"table=5, priority=10, tun_id=0x5/0xff, tun_dst=10.0.0.0/8, actions=output:7",
	"table=5, priority=10, ip, nw_src=10.0.0.0/255.0.255.0, actions=output:7",
	"table=5, priority=10, reg3=0x1/0x1, actions=load:0x1->NXM_NX_REG4[3],load:0xff->NXM_NX_REG5[8..15],move:NXM_NX_REG3[0..7]->NXM_NX_REG6[24..31],goto_table:6",
	"table=5, priority=10, actions=set_field:0x7->reg0,set_field:0x1234->tun_id,set_field:0a:58:0a:80:00:05->eth_dst,output:3",
	"table=5, priority=10, actions=load:0x5->NXM_NX_TUN_ID[0..31],move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],output:1",
	"table=5, priority=10, actions=note:",
}

func TestParseRoundTrip(t *testing.T) {
	for _, s := range specRules {
		r, err := ParseRule(s)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", s, err)
			continue
		}
		out := r.String()
		if out != s {
			t.Errorf("String mismatch:\n in  %s\n out %s", s, out)
		}
		r2, err := ParseRule(out)
		if err != nil {
			t.Errorf("reparse %q: %v", out, err)
			continue
		}
		if !r.Equal(r2) {
			t.Errorf("round trip changed the rule:\n %s\n %s", out, r2)
		}
	}
}

// TestParseVariants checks that other spellings mean the same rule.
func TestParseVariants(t *testing.T) {
	cases := []parseCase{
		{"priority=100,in_port=3,arp,nw_src=10.128.0.3 actions=goto_table:30", "table=0, priority=100, in_port=3, arp, nw_src=10.128.0.3, actions=goto_table:30"},
		{"in_port=1 actions=drop", "table=0, priority=32768, in_port=1, actions=drop"},
		{"actions=", "table=0, priority=32768, actions=drop"},
		{"cookie=0x10, duration=3.2s, table=20, n_packets=5, n_bytes=300, idle_age=2, priority=100,ip,in_port=3,nw_src=10.128.0.3 actions=load:0x5->NXM_NX_REG0[],goto_table:27",
			"table=20, priority=100, cookie=0x10, in_port=3, ip, nw_src=10.128.0.3, actions=load:0x5->NXM_NX_REG0[],goto_table:27"},
		{"table=1,eth_src=0A:58:0A:80:00:03,eth_dst=0a:58:a:80:0:4,ip,ip_src=1.2.3.4/32,tcp_dst=80,tcp actions=output:5", "table=1, priority=32768, tcp, dl_src=0a:58:0a:80:00:03, dl_dst=0a:58:0a:80:00:04, nw_src=1.2.3.4, tp_dst=80, actions=output:5"},
		{"table=1, arp, arp_spa=10.0.0.1, arp_tpa=10.0.0.2, actions=IN_PORT", "table=1, priority=32768, arp, nw_src=10.0.0.1, nw_dst=10.0.0.2, actions=in_port"},
		{"actions=output:in_port, 5, mod_dl_dst:0a:00:00:00:00:01, set_tunnel:0x9", "table=0, priority=32768, actions=in_port,output:5,set_field:0a:00:00:00:00:01->eth_dst,set_field:0x9->tun_id"},
		{"reg0=0x7/0x3, tun_id=0x0/0x0 actions=output:reg2[]", "table=0, priority=32768, reg0=0x3/0x3, actions=output:NXM_NX_REG2[]"},
		{"actions=load:0xffffffff->NXM_NX_REG1[0..31],resubmit(,3)", "table=0, priority=32768, actions=load:0xffffffff->NXM_NX_REG1[],resubmit(,3)"},
		{"ip,nw_dst=10.0.0.0/0 actions=drop", "table=0, priority=32768, ip, actions=drop"},
		{"actions=note:0a.0B0c", "table=0, priority=32768, actions=note:0a.0b.0c"},
		{"udp, udp_dst=53, udp_src=0x10/0xf0 actions=drop", "table=0, priority=32768, udp, tp_src=0x10/0xf0, tp_dst=53, actions=drop"},
		{"sctp, sctp_dst=9 actions=drop", "table=0, priority=32768, sctp, tp_dst=9, actions=drop"},
		{"reg0=0xa, reg7=0xffffffff actions=drop", "table=0, priority=32768, reg0=10, reg7=4294967295, actions=drop"},
	}
	checkVariants(t, cases)
}

// parseCase is a rule text and what is expected of it: its String, or a
// part of its error.
type parseCase struct{ in, want string }

// checkVariants checks that each text parses to the rule printed as want.
func checkVariants(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, c := range cases {
		r, err := ParseRule(c.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", c.in, err)
			continue
		}
		if got := r.String(); got != c.want {
			t.Errorf("ParseRule(%q).String():\n got  %s\n want %s", c.in, got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []parseCase{
		{"in_port=1", "missing actions="},
		{"in_port=x actions=drop", "column 1 (in_port)"},
		{"priority=70000 actions=drop", "priority"},
		{"table=255 actions=drop", "table"},
		{"foo=1 actions=drop", "(foo): unknown"},
		{"nw_src=10.0.0.1 actions=drop", "(nw_src): requires ip or arp"},
		{"ip, tp_dst=80 actions=drop", "(tp_dst): requires tcp, udp or sctp"},
		{"udp, tcp_dst=80 actions=drop", "(tcp_dst): requires tcp"},
		{"ip, arp_sha=00:00:00:00:00:01 actions=drop", "requires arp"},
		{"arp, tcp actions=drop", "conflicts"},
		{"in_port=1/1 actions=drop", "not maskable"},
		{"ip, nw_src=10.0.0.300 actions=drop", "bad IPv4 address"},
		{"ip, nw_src=10.0.0.1/33 actions=drop", "prefix length"},
		{"dl_src=00:11 actions=drop", "Ethernet address"},
		{"reg8=1 actions=drop", "unknown"},
		{"actions=output:NORMAL", "(output)"},
		{"actions=output:0", "reserved"},
		{"table=5, actions=goto_table:5", "must go forward"},
		{"table=5, actions=goto_table:7,output:1", "goto_table must be the last"},
		{"actions=resubmit:3", "resubmit(,TABLE)"},
		{"actions=resubmit(3,4)", "not supported"},
		{"actions=load:0x1ff->NXM_NX_REG0[0..7]", "does not fit"},
		{"actions=load:1->NXM_NX_REG0[0..40]", "out of"},
		{"actions=move:NXM_NX_REG0[0..3]->NXM_NX_REG1[0..4]", "widths"},
		{"actions=load:1->NXM_OF_ETH_SRC[]", "read-only"},
		{"actions=set_field:1->reg9", "unknown field"},
		{"actions=drop,output:1", "only action"},
		{"actions=note:0g", "bad note"},
		{"actions=resubmit(,3", "unbalanced"},
		{"actions=frobnicate", "unknown or unsupported action"},
		{"cookie=1/1 actions=drop", "cookie mask"},
		{"idle_timeout=10 actions=drop", "timeouts"},
	}
	checkParseErrors(t, cases)
}

// checkParseErrors checks that each text is refused with a SyntaxError
// (wrapping ErrSyntax, with a column) that mentions want.
func checkParseErrors(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, c := range cases {
		_, err := ParseRule(c.in)
		if err == nil {
			t.Errorf("ParseRule(%q): no error", c.in)
			continue
		}
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseRule(%q): %v does not wrap ErrSyntax", c.in, err)
		}
		var se *SyntaxError
		if !errors.As(err, &se) || se.Col < 1 {
			t.Errorf("ParseRule(%q): %v has no column", c.in, err)
		}
		if !strings.Contains(err.Error(), c.want) && !strings.Contains(err.Error(), strings.ReplaceAll(c.want, "widths", "bits")) {
			t.Errorf("ParseRule(%q): %v, want it to mention %q", c.in, err, c.want)
		}
	}
}

func TestParseRules(t *testing.T) {
	text := "# comment\n\ntable=0, priority=1, actions=output:2\n   \n  # another\ntable=1, actions=drop\n"
	rs, err := ParseRules(text)
	if err != nil || len(rs) != 2 {
		t.Fatalf("ParseRules: %v, %d rules", err, len(rs))
	}
	_, err = ParseRules("actions=drop\nbogus actions=drop\n")
	if err == nil || !strings.Contains(err.Error(), "line 2") || !errors.Is(err, ErrSyntax) {
		t.Fatalf("ParseRules error = %v, want line 2 syntax error", err)
	}
}

func TestParseFilterAndFields(t *testing.T) {
	f, err := ParseFilter("table=20, priority=100, cookie=0x5/0xff, in_port=3, ip")
	if err != nil {
		t.Fatal(err)
	}
	if f.Table != 20 || f.Priority != 100 || f.Cookie != 5 || f.CookieMask != 0xff || f.Match.Mask.InPort == 0 {
		t.Fatalf("ParseFilter = %+v", f)
	}
	f, err = ParseFilter("")
	if err != nil || f.Table != -1 || f.CookieMask != 0 {
		t.Fatalf("empty filter = %+v, %v", f, err)
	}
	f, _ = ParseFilter("cookie=0x7")
	if f.CookieMask != ^uint64(0) {
		t.Fatalf("cookie without mask: mask %x", f.CookieMask)
	}
	m, err := ParseMatch("table=3, tcp, tp_dst=80")
	if err != nil || m.Value.TpDst != 80 || m.Mask.TpDst != 0xffff {
		t.Fatalf("ParseMatch = %+v, %v", m, err)
	}
	desc := "in_port=3,tcp,reg0=5,tun_id=0x9,nw_src=10.128.0.3,nw_dst=10.128.0.4,tp_src=1234,tp_dst=80"
	fl, err := ParseFields(desc)
	if err != nil {
		t.Fatal(err)
	}
	if fl.InPort != 3 || fl.NwProto != 6 || fl.TpDst != 80 || fl.Regs[0] != 5 || fl.TunID != 9 {
		t.Fatalf("ParseFields = %+v", fl)
	}
	if got := FormatFields(fl); got != desc {
		t.Fatalf("FormatFields = %q, want %q", got, desc)
	}
	if _, err := ParseFields("ip,nw_src=10.0.0.0/8"); err == nil {
		t.Fatal("ParseFields accepted a mask")
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range specRules {
		f.Add(s)
	}
	for _, s := range ctRules {
		f.Add(s)
	}
	f.Add("priority=100,in_port=3,arp,nw_src=10.128.0.3 actions=goto_table:30")
	f.Add("actions=")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		out := r.String()
		r2, err := ParseRule(out)
		if err != nil {
			t.Fatalf("ParseRule(%q) ok, but its String %q does not parse: %v", s, out, err)
		}
		if !r.Equal(r2) {
			t.Fatalf("round trip changed %q:\n %s\n %s", s, out, r2)
		}
		if out2 := r2.String(); out2 != out {
			t.Fatalf("String not stable: %q vs %q", out, out2)
		}
	})
}
