package flowtable

import (
	"strings"
	"testing"

	"github.com/gvswitch/gvs/conntrack"
)

// statefulRules is the benchmarks' stateful rule set in front of the
// OpenShift program (a copy of lab/cluster's statefulGVS): every IP
// packet goes through the tracker; new connections are committed,
// established and related ones pass, the rest is dropped.
var statefulRules = []string{
	"table=0, priority=1001, ip, ct_state=-trk, actions=ct(table=0)",
	"table=30, priority=500, ip, ct_state=+trk+new, actions=ct(commit),goto_table:31",
	"table=30, priority=500, ip, ct_state=+trk+est, actions=goto_table:31",
	"table=30, priority=500, ip, ct_state=+trk+rel, actions=goto_table:31",
	"table=30, priority=400, ip, ct_state=+trk, actions=drop",
}

// statefulProgram is loadProgram(pods, remotes) with statefulRules.
func statefulProgram(tb testing.TB, pods, remotes int) *Table {
	tb.Helper()
	tbl := loadProgram(tb, pods, remotes)
	if err := tbl.Add(mustRules(tb, strings.Join(statefulRules, "\n"))...); err != nil {
		tb.Fatal(err)
	}
	return tbl
}

// tcpFields is a TCP packet's fields from src:sport to dst:dport.
func tcpFields(tb testing.TB, inPort uint32, src, dst [4]byte, sport, dport uint16) Fields {
	tb.Helper()
	fr := udpFrame(src, dst, sport, dport)
	fr[14+9] = 6
	f := Fields{InPort: inPort}
	if !Extract(fr, &f) {
		tb.Fatal("Extract failed")
	}
	return f
}

// BenchmarkCacheNewConnections runs new TCP connections between two pods
// of one node through the stateful program behind two caches of 4096
// entries (the default size), one per direction as the switch's workers
// have them: per connection a SYN, an ACK and a request from the client,
// a SYN-ACK and a response from the server, each a first pass from table
// 0 and a recirculation (+new, +est, +est+rpl) after its ct step: ten
// cache lookups. Each connection has a client port of its own (from 1024
// on, 60000 of them, so that an entry is never a previous lap's). ns/op
// is per connection; misses/conn counts both caches' misses.
//
// It needs nothing but Cache.Run and RunFrom, so that it runs unchanged
// on the trees before the key mask.
func BenchmarkCacheNewConnections(b *testing.B) {
	s := statefulProgram(b, 60, 4).Snapshot()
	const client, server = 0, 50 // the same VNID
	cip, sip := podIP(client), podIP(server)
	toServer, toClient := NewCache(4096), NewCache(4096)
	syn := tcpFields(b, podPort(client), cip, sip, 1024, 80)
	synack := tcpFields(b, podPort(server), sip, cip, 80, 1024)
	var v Verdict
	var f Fields
	// pass runs f0 and its recirculation with ct_state st through c.
	pass := func(c *Cache, f0 *Fields, st conntrack.State, cport uint16) {
		f = *f0
		c.Run(s, &f, &v)
		if v.NCT != 1 || v.CT[0].CT == nil {
			b.Fatalf("no ct step for %s", FormatFields(*f0))
		}
		step := &v.CT[0]
		f = *f0
		f.Regs, f.TunID, f.TunSrc, f.TunDst = step.Regs, step.TunID, step.TunSrc, step.TunDst
		f.CtState, f.CtZone, f.CtNwProto = st|conntrack.StateTrk, step.Zone, 6
		f.CtNwSrc, f.CtNwDst, f.CtTpSrc, f.CtTpDst = cip, sip, cport, 80
		c.RunFrom(s, step.CT.Table, &f, &v)
		if v.NOut != 1 {
			b.Fatalf("recirculation of %s: %d outputs (drop %v)", FormatFields(f), v.NOut, v.Drop)
		}
	}
	k := 0
	conn := func() {
		cport := uint16(1024 + k%60000)
		k++
		syn.TpSrc, synack.TpDst = cport, cport
		pass(toServer, &syn, conntrack.StateNew, cport)
		pass(toClient, &synack, conntrack.StateEst|conntrack.StateRpl, cport)
		pass(toServer, &syn, conntrack.StateEst, cport)
		pass(toServer, &syn, conntrack.StateEst, cport)
		pass(toClient, &synack, conntrack.StateEst|conntrack.StateRpl, cport)
	}
	for range 8192 { // the caches grow to their size
		conn()
	}
	_, m1 := toServer.Stats()
	_, m2 := toClient.Stats()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		conn()
		n++
	}
	_, n1 := toServer.Stats()
	_, n2 := toClient.Stats()
	b.ReportMetric(float64(n1-m1+n2-m2)/float64(n), "misses/conn")
}
