package flowtable

import (
	"strconv"
	"testing"
)

// coldFlows fills a cache of size entries with distinct UDP flows between
// local pods and returns the flows that hit on a second pass (the ones no
// other flow shares an entry with), at most size/2 of them.
func coldFlows(tb testing.TB, s *Snapshot, c *Cache, size int) []Fields {
	var all []Fields
	for k := 0; len(all) < size; k++ {
		src, dst := k%benchPods, (k/benchPods+k+1)%benchPods
		all = append(all, fieldsOf(tb, podPort(src), udpFrame(podIP(src), podIP(dst), uint16(1024+k%50000), uint16(2000+k/50000))))
	}
	var v Verdict
	for range 4 { // the cache grows fourfold per round of misses
		for i := range all {
			f := all[i]
			c.Run(s, &f, &v)
		}
	}
	var hit []Fields
	for i := range all {
		f := all[i]
		if c.Run(s, &f, &v) && len(hit) < size/2 {
			hit = append(hit, all[i])
		}
	}
	if len(hit) < size/4 {
		tb.Fatalf("only %d of %d flows hit", len(hit), len(all))
	}
	return hit
}

// BenchmarkCacheBatch runs batches of 64 frames of distinct flows through a
// cache of many entries, all hits, in an order that jumps around the whole
// cache, so that each lookup's entry is cold (the cache of 16384 and 65536
// entries, 8.5 and 34 MiB, is larger than this machine's 4 MiB L2; 4096 is
// the default size, 2 MiB). "serial" looks each frame up as the switch's
// worker did (RunFrom); "prefetch" hashes the batch's frames, Prefetches
// their entries, then looks them up (RunHashed). ns/op is per frame.
func BenchmarkCacheBatch(b *testing.B) {
	const batch = 64
	tbl := loadProgram(b, benchPods, benchRemotes)
	keepTpSrc(b, tbl) // a flow is a source port
	s := tbl.Snapshot()
	for _, size := range []int{4096, 16384, 65536} {
		c := NewCache(size)
		flows := coldFlows(b, s, c, size)
		// A stride coprime with the number of flows walks all of them
		// before it repeats, far apart in the cache.
		stride := len(flows)/2 + 1
		for gcd(stride, len(flows)) != 1 {
			stride++
		}
		var fs [batch]Fields
		var hs [batch]uint64
		var v Verdict
		k := 0
		next := func() {
			for j := range fs {
				fs[j] = flows[k]
				k = (k + stride) % len(flows)
			}
		}
		for _, mode := range []string{"serial", "prefetch"} {
			b.Run(mode+"/"+strconv.Itoa(size), func(b *testing.B) {
				h0, _ := c.Stats()
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					b.StopTimer()
					next()
					b.StartTimer()
					if mode == "serial" {
						for j := range fs {
							c.RunFrom(s, 0, &fs[j], &v)
						}
					} else {
						for j := range fs {
							hs[j] = c.Hash(s, 0, &fs[j])
						}
						c.Prefetch(hs[:])
						for j := range fs {
							c.RunHashed(s, 0, &fs[j], &v, hs[j])
						}
					}
					n += batch
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/frame")
				if h, _ := c.Stats(); h-h0 != uint64(n) {
					b.Fatalf("%d hits of %d lookups", h-h0, n)
				}
			})
		}
	}
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// TestCachePrefetchNoAllocs checks that Hash, Prefetch and RunHashed
// allocate nothing on the hot path, and that RunHashed with the key's
// hash gives RunFrom's verdict.
func TestCachePrefetchNoAllocs(t *testing.T) {
	tbl := loadProgram(t, benchPods, benchRemotes)
	keepTpSrc(t, tbl) // a flow is a source port
	s := tbl.Snapshot()
	c := NewCache(4096)
	flows := coldFlows(t, s, c, 4096)[:64]
	var hs [64]uint64
	var v, w Verdict
	allocs := testing.AllocsPerRun(100, func() {
		for j := range flows {
			hs[j] = c.Hash(s, 0, &flows[j])
		}
		c.Prefetch(hs[:])
		for j := range flows {
			f := flows[j]
			if !c.RunHashed(s, 0, &f, &v, hs[j]) {
				t.Fatal("miss")
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch, want 0", allocs)
	}
	for j := range flows {
		f, g := flows[j], flows[j]
		c.RunHashed(s, 0, &f, &v, c.Hash(s, 0, &f))
		s.Run(&g, &w)
		if v.NOut != w.NOut || v.Drop != w.Drop || v.NHits != w.NHits || (v.NOut > 0 && v.Outputs[0] != w.Outputs[0]) {
			t.Fatalf("flow %d: cached %+v, pipeline %+v", j, v, w)
		}
	}
}
