package flowtable_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gvswitch/gvs/flowtable"
)

func Example() {
	rules, err := flowtable.ParseRules(`
table=0, priority=100, in_port=3, ip, nw_src=10.128.0.3, actions=load:0x5->NXM_NX_REG0[],goto_table:90
table=90, priority=100, ip, nw_dst=10.129.0.0/23, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:10.0.0.2->tun_dst,output:1
`)
	if err != nil {
		panic(err)
	}
	t := flowtable.New(flowtable.Config{})
	if err := t.Add(rules...); err != nil {
		panic(err)
	}
	f, _ := flowtable.ParseFields("in_port=3,ip,nw_src=10.128.0.3,nw_dst=10.129.0.9")
	var v flowtable.Verdict
	t.Snapshot().Run(&f, &v)
	o := v.Outputs[0]
	fmt.Println(v.NOut, o.Port, o.TunID, o.TunDst)
	// Output: 1 1 5 [10 0 0 2]
}

// Rules built in Go are the rules their text parses to: NewRule checks
// them as ParseRule checks text, and String prints them in the text syntax.
func ExampleNewRule() {
	pod := netip.MustParseAddr("10.128.0.3")
	r, err := flowtable.NewRule(20, 100, 0x10a800003,
		[]flowtable.Cond{flowtable.InPort(3), flowtable.IP(), flowtable.NwSrc(pod)},
		flowtable.Load(5, flowtable.FieldReg0.Whole()), flowtable.GotoTable(27))
	if err != nil {
		panic(err)
	}
	fmt.Println(r)
	p, _ := flowtable.ParseRule(r.String())
	fmt.Println(p.Equal(r))

	// An invalid rule is an error: nw_src needs ip or arp.
	_, err = flowtable.NewRule(20, 100, 0, []flowtable.Cond{flowtable.NwSrc(pod)})
	fmt.Println(errors.Is(err, flowtable.ErrInvalidRule))
	// Output:
	// table=20, priority=100, cookie=0x10a800003, in_port=3, ip, nw_src=10.128.0.3, actions=load:0x5->NXM_NX_REG0[],goto_table:27
	// true
	// true
}

// A Builder collects a program's rules and keeps the first error, so a
// generator checks once; here, NetworkPolicy-style allow rules for a few
// peers and ports, installed with one Add.
func ExampleBuilder() {
	var b flowtable.Builder
	dst := netip.MustParseAddr("10.128.0.3")
	peers := []netip.Prefix{netip.MustParsePrefix("10.128.0.7/32"), netip.MustParsePrefix("10.128.2.0/23")}
	for _, peer := range peers {
		for _, port := range []uint16{80, 443} {
			b.Add(80, 150, 0x500000001,
				[]flowtable.Cond{flowtable.TCP(), flowtable.Reg(1, 10), flowtable.NwSrcPrefix(peer), flowtable.NwDst(dst), flowtable.TpDst(port)},
				flowtable.OutputField(flowtable.FieldReg2.Whole()))
		}
	}
	b.Add(80, 0, 0, nil) // no actions: drop
	rules, err := b.Rules()
	if err != nil {
		panic(err)
	}
	t := flowtable.New(flowtable.Config{})
	if err := t.Add(rules...); err != nil {
		panic(err)
	}
	for _, r := range rules {
		fmt.Println(r)
	}
	// Output:
	// table=80, priority=150, cookie=0x500000001, tcp, reg1=10, nw_src=10.128.0.7, nw_dst=10.128.0.3, tp_dst=80, actions=output:NXM_NX_REG2[]
	// table=80, priority=150, cookie=0x500000001, tcp, reg1=10, nw_src=10.128.0.7, nw_dst=10.128.0.3, tp_dst=443, actions=output:NXM_NX_REG2[]
	// table=80, priority=150, cookie=0x500000001, tcp, reg1=10, nw_src=10.128.2.0/23, nw_dst=10.128.0.3, tp_dst=80, actions=output:NXM_NX_REG2[]
	// table=80, priority=150, cookie=0x500000001, tcp, reg1=10, nw_src=10.128.2.0/23, nw_dst=10.128.0.3, tp_dst=443, actions=output:NXM_NX_REG2[]
	// table=80, priority=0, actions=drop
}
