package flowtable_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gvswitch/gvs/conntrack"
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

// A stateful firewall built in Go: table 0 sends every untracked IPv4
// packet through the connection tracker and on to table 1 (ct(table=1)),
// where pod port 1 may open connections, which are committed, and only
// their replies come back in from port 2.
func ExampleCt() {
	var b flowtable.Builder
	trk, nw, est, rel := conntrack.StateTrk, conntrack.StateNew, conntrack.StateEst, conntrack.StateRel
	b.Add(0, 100, 0, []flowtable.Cond{flowtable.IP(), flowtable.CtState(0, trk)},
		flowtable.Ct(flowtable.CT{Recirc: true, Table: 1}))
	b.Add(1, 100, 0, []flowtable.Cond{flowtable.InPort(1), flowtable.IP(), flowtable.CtState(trk|nw, 0)},
		flowtable.Ct(flowtable.CT{Commit: true}), flowtable.OutputPort(2))
	b.Add(1, 100, 0, []flowtable.Cond{flowtable.InPort(1), flowtable.IP(), flowtable.CtState(trk|est, 0)}, flowtable.OutputPort(2))
	b.Add(1, 100, 0, []flowtable.Cond{flowtable.InPort(2), flowtable.IP(), flowtable.CtState(trk|est, 0)}, flowtable.OutputPort(1))
	b.Add(1, 100, 0, []flowtable.Cond{flowtable.InPort(2), flowtable.IP(), flowtable.CtState(trk|rel, 0)}, flowtable.OutputPort(1))
	b.Add(1, 0, 0, nil)
	rules, err := b.Rules()
	if err != nil {
		panic(err)
	}
	for _, r := range rules {
		fmt.Println(r)
	}
	// Output:
	// table=0, priority=100, ip, ct_state=-trk, actions=ct(table=1)
	// table=1, priority=100, in_port=1, ip, ct_state=+new+trk, actions=ct(commit),output:2
	// table=1, priority=100, in_port=1, ip, ct_state=+est+trk, actions=output:2
	// table=1, priority=100, in_port=2, ip, ct_state=+est+trk, actions=output:1
	// table=1, priority=100, in_port=2, ip, ct_state=+rel+trk, actions=output:1
	// table=1, priority=0, actions=drop
}

// A trace follows a packet through ct actions and their recirculations
// (gvsctl trace prints the same); without a tracker to ask, the
// recirculation resumes as +trk+new, as ovs-appctl ofproto/trace assumes,
// unless TraceOptions.CTNext says otherwise.
func ExampleSnapshot_TraceWith() {
	rules, err := flowtable.ParseRules(`
table=0, priority=100, ip, ct_state=-trk, actions=ct(table=1)
table=1, priority=100, ip, ct_state=+new+trk, actions=ct(commit),output:2
table=1, priority=100, ip, ct_state=+est+trk, actions=output:3
`)
	if err != nil {
		panic(err)
	}
	t := flowtable.New(flowtable.Config{})
	if err := t.Add(rules...); err != nil {
		panic(err)
	}
	f, _ := flowtable.ParseFields("in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_src=4000,tp_dst=53")
	for _, next := range [][]conntrack.State{nil, {conntrack.StateTrk | conntrack.StateEst}} {
		tr := t.Snapshot().TraceWith(f, flowtable.TraceOptions{CTNext: next})
		r := tr.Recirc[0]
		fmt.Println(tr.Datapath, "|", r.State, r.Source, "|", r.Datapath)
	}
	// Output:
	// ct,recirc(1) | new|trk default | ct(commit),2
	// ct,recirc(1) | est|trk ct-next | 3
}
