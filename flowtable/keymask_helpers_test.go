package flowtable

import (
	"math/bits"
	"testing"
)

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

// cacheHash is the reference definition of the cache's hash: the same
// four lanes as keyHash over the whole key, written as a loop, with no
// wildcard. keyHash must give the hash of the masked key (TestKeyMaskStateful)
// and, for a snapshot that wildcards nothing, the hash of the whole key
// (TestKeyMaskFull).
func cacheHash(fw *words, start uint8) uint64 {
	h0, h1, h2, h3 := uint64(hashSeed)^uint64(start), uint64(hashMul1), uint64(hashMul2), uint64(hashSeed)>>1
	i := 0
	for ; i+4 <= len(fw); i += 4 {
		h0 = hashWord(h0, fw[i])
		h1 = hashWord(h1, fw[i+1])
		h2 = hashWord(h2, fw[i+2])
		h3 = hashWord(h3, fw[i+3])
	}
	for ; i < len(fw); i++ {
		h0 = hashWord(h0, fw[i])
	}
	return hashFinish(h0 ^ bits.RotateLeft64(h1, 17) ^ bits.RotateLeft64(h2, 31) ^ bits.RotateLeft64(h3, 47))
}
