package flowtable

import (
	"sync"
	"testing"
	"unsafe"
)

// TestRuleCountersOwnLines: a rule's packet and byte counters, which every
// worker that hits the rule writes (Counters.Flush), share no cache line
// with the fields a lookup reads (Table to Actions, slot), wherever the
// allocator puts the rule: at least a line lies between them and both
// ends.
func TestRuleCountersOwnLines(t *testing.T) {
	const line = 64
	var r Rule
	first, last := unsafe.Offsetof(r.packets), unsafe.Offsetof(r.bytes)+unsafe.Sizeof(r.bytes)
	if last-first > line {
		t.Fatalf("the counters span %d bytes, more than a line", last-first)
	}
	readOnly := []struct {
		name      string
		off, size uintptr
	}{
		{"Table", unsafe.Offsetof(r.Table), unsafe.Sizeof(r.Table)},
		{"Priority", unsafe.Offsetof(r.Priority), unsafe.Sizeof(r.Priority)},
		{"Cookie", unsafe.Offsetof(r.Cookie), unsafe.Sizeof(r.Cookie)},
		{"Match", unsafe.Offsetof(r.Match), unsafe.Sizeof(r.Match)},
		{"Actions", unsafe.Offsetof(r.Actions), unsafe.Sizeof(r.Actions)},
		{"slot", unsafe.Offsetof(r.slot), unsafe.Sizeof(r.slot)},
	}
	for _, f := range readOnly {
		if f.off+f.size+line > first && f.off < last+line {
			t.Errorf("field %s (bytes %d–%d) is within a line of the counters (bytes %d–%d)", f.name, f.off, f.off+f.size, first, last)
		}
	}
	// The next object in memory starts at Sizeof(Rule) or later.
	if unsafe.Sizeof(r) < last+line {
		t.Errorf("Rule ends %d bytes after its counters, want at least a line (%d)", unsafe.Sizeof(r)-last, line)
	}
}

// BenchmarkCountersTwoWorkers is the lookups and counting of two workers
// hitting the same rules in batches of one packet, as the two directions
// of a connection do on two CPUs: each reads the rules (slot, actions) and
// flushes its counters into them after each batch.
func BenchmarkCountersTwoWorkers(b *testing.B) {
	rules := make([]*Rule, 12)
	for i := range rules {
		rules[i] = &Rule{Priority: uint16(i), Actions: []Action{{}}, slot: nextSlot()}
	}
	var v Verdict
	for _, r := range rules {
		v.Hits[v.NHits] = r
		v.NHits++
	}
	b.ReportAllocs()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			var c Counters
			n := 0
			for range b.N {
				for _, r := range v.Hits[:v.NHits] {
					n += len(r.Actions)
				}
				c.Account(&v, 64)
				c.Flush()
			}
			_ = n
		})
	}
	wg.Wait()
}
