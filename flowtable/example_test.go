package flowtable_test

import (
	"fmt"

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
