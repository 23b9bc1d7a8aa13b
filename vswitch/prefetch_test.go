package vswitch

import (
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/packet"
)

// coldWorker is batchWorker with a flow cache of size entries, warmed
// with flows (UDP source ports) that each have an entry of their own:
// every lookup of them hits. It returns the worker and the source ports.
func coldWorker(tb testing.TB, size int) (*worker, []uint16) {
	tb.Helper()
	w, _ := benchWorker(tb)
	w.cache = flowtable.NewCache(size)
	// A flow is a source port: a rule that reads tp_src (in a table no
	// packet reaches) keeps it in the cache's key (flowtable.Cache).
	keep, err := flowtable.ParseRule("table=250, priority=1, udp, tp_src=1, actions=drop")
	if err != nil {
		tb.Fatal(err)
	}
	if err := w.s.cfg.Table.Add(keep); err != nil {
		tb.Fatal(err)
	}
	snap := w.s.cfg.Table.Snapshot()
	// Frames alternate between two destinations (batchWorker): a flow is
	// a source port and the destination of frame i%2.
	used := make([]bool, size)
	var sports []uint16
	for p := 1; p < 65536 && len(sports) < size/2; p++ {
		ok := true
		for i := range 2 {
			binary.BigEndian.PutUint16(w.bufs[i][Headroom+packet.EthernetLen+20:], uint16(p))
			f := flowtable.Fields{InPort: w.in.no}
			if !flowtable.Extract(w.bufs[i][Headroom:Headroom+w.meta[i].Size], &f) {
				tb.Fatal("Extract failed")
			}
			if used[w.cache.Hash(snap, 0, &f)&uint64(size-1)] {
				ok = false
			}
		}
		if !ok {
			continue
		}
		for i := range 2 {
			binary.BigEndian.PutUint16(w.bufs[i][Headroom+packet.EthernetLen+20:], uint16(p))
			f := flowtable.Fields{InPort: w.in.no}
			flowtable.Extract(w.bufs[i][Headroom:Headroom+w.meta[i].Size], &f)
			used[w.cache.Hash(snap, 0, &f)&uint64(size-1)] = true
		}
		sports = append(sports, uint16(p))
	}
	return w, sports
}

// loadFlows writes the source ports of the next batch into w's frames,
// from sports at k on (by stride, so that neighbours in a batch are far
// apart in the cache), and returns the next k.
func loadFlows(w *worker, sports []uint16, k, stride int) int {
	for i := range w.bufs {
		binary.BigEndian.PutUint16(w.bufs[i][Headroom+packet.EthernetLen+20:], sports[(k/2)%len(sports)])
		k += stride
	}
	return k
}

// BenchmarkProcessColdFlows runs the worker's batches of 64 frames of
// distinct flows through a flow cache of 4096 (the default, 2 MiB),
// 16384 and 65536 entries (8.5 and 34 MiB, larger than this machine's
// 4 MiB L2), every lookup a hit on an entry that is cold: a batch's
// flows are far apart and the next batch's are others. ns/frame excludes
// the rewriting of the frames' ports between batches (timer stopped).
func BenchmarkProcessColdFlows(b *testing.B) {
	for _, size := range []int{4096, 16384, 65536} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			w, sports := coldWorker(b, size)
			n := len(w.bufs)
			// An even stride keeps frame i's destination i%2; the
			// flows go by k/2.
			stride := 2 * (len(sports)/3 + 1)
			k := 0
			for range 4 * len(sports) / n { // the cache grows, then fills
				k = loadFlows(w, sports, k, stride)
				w.process(n)
			}
			h0, _ := w.cache.Stats()
			b.ReportAllocs()
			frames := 0
			for b.Loop() {
				b.StopTimer()
				k = loadFlows(w, sports, k, stride)
				b.StartTimer()
				w.process(n)
				frames += n
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames), "ns/frame")
			if h, _ := w.cache.Stats(); h-h0 != uint64(frames) {
				b.Fatalf("%d hits of %d lookups", h-h0, frames)
			}
		})
	}
}

// TestProcessColdFlowsAllocs: a batch of distinct flows, every lookup a
// hit after the cache's entries were prefetched, allocates nothing.
func TestProcessColdFlowsAllocs(t *testing.T) {
	w, sports := coldWorker(t, 4096)
	n := len(w.bufs)
	stride := 2 * (len(sports)/3 + 1)
	k := 0
	for range 4 * len(sports) / n {
		k = loadFlows(w, sports, k, stride)
		w.process(n)
	}
	h0, _ := w.cache.Stats()
	runs := 0
	if a := testing.AllocsPerRun(50, func() {
		k = loadFlows(w, sports, k, stride)
		w.process(n)
		runs++
	}); a != 0 {
		t.Errorf("a batch allocates %.1f times", a)
	}
	if h, _ := w.cache.Stats(); h-h0 != uint64(runs*n) {
		t.Errorf("%d hits of %d lookups", h-h0, runs*n)
	}
}
