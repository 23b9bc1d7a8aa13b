//go:build amd64 && !purego

package packet

import "golang.org/x/sys/cpu"

// haveAVX2 selects the AVX2 loops of copysum_amd64.s for the bulk of a
// sum; tests turn it off to check the portable loops on the same machine.
var haveAVX2 = cpu.X86.HasAVX2

// copySumAVX2 copies n bytes from src to dst and returns the sum of src's
// little-endian 32-bit words (not folded). n is a positive multiple of 32.
//
//go:noescape
func copySumAVX2(dst, src *byte, n int) uint64

// sumAVX2 returns the sum of the little-endian 32-bit words of src's n
// bytes (not folded). n is a positive multiple of 32.
//
//go:noescape
func sumAVX2(src *byte, n int) uint64
