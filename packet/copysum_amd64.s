//go:build amd64 && !purego

#include "textflag.h"

// The one's-complement sums below add the data as little-endian 32-bit
// words, each zero-extended into a 64-bit lane (VPUNPCKLDQ/VPUNPCKHDQ with
// a zero register), in four accumulators of four lanes. A lane takes one
// word (< 2^32) per 64 bytes of data, so the sixteen lanes together stay
// under n·2^30 for n bytes: exact for anything under 16 GiB (frames are at
// most 64 KiB). The caller folds the result like its own 64-bit sum
// (2^32 ≡ 1 modulo 0xffff).

// ACC adds the eight 32-bit words of Y to the accumulators LO and HI.
#define ACC(Y, LO, HI) \
	VPUNPCKLDQ Y15, Y, Y2 \
	VPUNPCKHDQ Y15, Y, Y3 \
	VPADDQ     Y2, LO, LO \
	VPADDQ     Y3, HI, HI

// ZERO clears Y15 (the zero operand) and the accumulators Y4-Y7.
#define ZERO \
	VPXOR Y15, Y15, Y15 \
	VPXOR Y4, Y4, Y4    \
	VPXOR Y5, Y5, Y5    \
	VPXOR Y6, Y6, Y6    \
	VPXOR Y7, Y7, Y7

// REDUCE adds the sixteen lanes of Y4-Y7 into AX.
#define REDUCE \
	VPADDQ       Y5, Y4, Y4 \
	VPADDQ       Y7, Y6, Y6 \
	VPADDQ       Y6, Y4, Y4 \
	VEXTRACTI128 $1, Y4, X5 \
	VPADDQ       X5, X4, X4 \
	VPSHUFD      $0x4e, X4, X5 \
	VPADDQ       X5, X4, X4 \
	VMOVQ        X4, AX \
	VZEROUPPER

// func copySumAVX2(dst, src *byte, n int) uint64
// n is a positive multiple of 32; dst and src hold n bytes and do not overlap.
TEXT ·copySumAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	ZERO
	CMPQ CX, $64
	JB   copy32

copy64:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	ACC(Y0, Y4, Y5)
	ACC(Y1, Y6, Y7)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $64, CX
	CMPQ    CX, $64
	JAE     copy64

copy32:
	CMPQ    CX, $32
	JB      copyDone
	VMOVDQU (SI), Y0
	VMOVDQU Y0, (DI)
	ACC(Y0, Y4, Y5)

copyDone:
	REDUCE
	MOVQ AX, ret+24(FP)
	RET

// func sumAVX2(src *byte, n int) uint64
// n is a positive multiple of 32; src holds n bytes.
TEXT ·sumAVX2(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	ZERO
	CMPQ CX, $64
	JB   sum32

sum64:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	ACC(Y0, Y4, Y5)
	ACC(Y1, Y6, Y7)
	ADDQ    $64, SI
	SUBQ    $64, CX
	CMPQ    CX, $64
	JAE     sum64

sum32:
	CMPQ    CX, $32
	JB      sumDone
	VMOVDQU (SI), Y0
	ACC(Y0, Y4, Y5)

sumDone:
	REDUCE
	MOVQ AX, ret+16(FP)
	RET
