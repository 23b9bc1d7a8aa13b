package flowtable

import "testing"

// keepTpSrc adds to tbl a rule that reads tp_src (in table 250, which no
// program here reaches), so that the cache keys on tp_src: tests and
// benchmarks that make distinct flows out of UDP source ports use it to
// keep each flow its own cache entry, as before the key mask.
func keepTpSrc(tb testing.TB, tbl *Table) {
	tb.Helper()
	r, err := ParseRule("table=250, priority=1, udp, tp_src=1, actions=drop")
	if err != nil {
		tb.Fatal(err)
	}
	if err := tbl.Add(r); err != nil {
		tb.Fatal(err)
	}
	if m := tbl.Snapshot().KeyMask(); m.TpSrc != 0xffff {
		tb.Fatalf("tp_src not in the key mask: %s", FormatFields(m))
	}
}
