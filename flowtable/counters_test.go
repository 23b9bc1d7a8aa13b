package flowtable

import "testing"

// TestCounters: gathered hits reach the rules' counters exactly, also when
// rules share a slot, and nothing before Flush but what collisions pushed.
func TestCounters(t *testing.T) {
	var rules []*Rule
	for i := range 3 * counterSlots {
		r := &Rule{Priority: uint16(i), slot: nextSlot()}
		rules = append(rules, r)
	}
	rules[1].slot = rules[0].slot // a collision
	var c Counters
	want := map[*Rule][2]uint64{}
	for i := range 1000 {
		var v Verdict
		for k := 0; k < 5; k++ {
			r := rules[(i*7+k*13)%len(rules)]
			if i%3 == 0 {
				r = rules[k%2] // the colliding pair, alternately
			}
			v.Hits[v.NHits] = r
			v.NHits++
		}
		c.Account(&v, 100+i)
		for _, r := range v.Hits[:v.NHits] {
			w := want[r]
			want[r] = [2]uint64{w[0] + 1, w[1] + uint64(100+i)}
		}
		if i%97 == 0 {
			c.Flush()
		}
	}
	c.Flush()
	for _, r := range rules {
		p, b := r.Stats()
		if p != want[r][0] || b != want[r][1] {
			t.Fatalf("rule %d: %d packets %d bytes, want %v", r.Priority, p, b, want[r])
		}
	}
	var v Verdict
	v.Hits[0], v.Hits[1], v.NHits = rules[2], rules[3], 2
	if n := testing.AllocsPerRun(100, func() { c.Account(&v, 64); c.Flush() }); n != 0 {
		t.Errorf("%v allocations per batch", n)
	}
}
