//go:build !amd64 || purego

package packet

// haveAVX2 is false where there are no AVX2 loops: the portable loops do
// all the work.
var haveAVX2 = false

func copySumAVX2(dst, src *byte, n int) uint64 { panic("packet: no AVX2 loop on this platform") }

func sumAVX2(src *byte, n int) uint64 { panic("packet: no AVX2 loop on this platform") }
