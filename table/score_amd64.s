//go:build !purego

#include "textflag.h"

// One SipHash round on four 8-lane state vectors.
#define ROUND(v0, v1, v2, v3) \
	VPADDQ v1, v0, v0; \
	VPROLQ $13, v1, v1; \
	VPXORQ v0, v1, v1; \
	VPROLQ $32, v0, v0; \
	VPADDQ v3, v2, v2; \
	VPROLQ $16, v3, v3; \
	VPXORQ v2, v3, v3; \
	VPADDQ v3, v0, v0; \
	VPROLQ $21, v3, v3; \
	VPXORQ v0, v3, v3; \
	VPADDQ v1, v2, v2; \
	VPROLQ $17, v1, v1; \
	VPXORQ v2, v1, v1; \
	VPROLQ $32, v2, v2

// func scoresV4AVX512(st *sipState, w *uint64, out *uint64, n int)
//
// For each of n (a multiple of 16) final message words w[i], finishes the
// SipHash whose state after the row seed is st: out[i] = SipHash output
// (little-endian; the caller byte-swaps). Two groups of eight lanes are
// interleaved to hide the rounds' latency.
TEXT ·scoresV4AVX512(SB), NOSPLIT, $0-32
	MOVQ st+0(FP), AX
	MOVQ w+8(FP), SI
	MOVQ out+16(FP), DI
	MOVQ n+24(FP), CX
	VPBROADCASTQ 0(AX), Z16
	VPBROADCASTQ 8(AX), Z17
	VPBROADCASTQ 16(AX), Z18
	VPBROADCASTQ 24(AX), Z19
	MOVQ $0xff, BX
	VPBROADCASTQ BX, Z20

loop:
	VMOVDQU64 0(SI), Z8
	VMOVDQU64 64(SI), Z9
	VMOVDQA64 Z16, Z0
	VMOVDQA64 Z17, Z1
	VMOVDQA64 Z18, Z2
	VPXORQ    Z8, Z19, Z3
	VMOVDQA64 Z16, Z4
	VMOVDQA64 Z17, Z5
	VMOVDQA64 Z18, Z6
	VPXORQ    Z9, Z19, Z7
	ROUND(Z0, Z1, Z2, Z3)
	ROUND(Z4, Z5, Z6, Z7)
	ROUND(Z0, Z1, Z2, Z3)
	ROUND(Z4, Z5, Z6, Z7)
	VPXORQ Z8, Z0, Z0
	VPXORQ Z9, Z4, Z4
	VPXORQ Z20, Z2, Z2
	VPXORQ Z20, Z6, Z6
	ROUND(Z0, Z1, Z2, Z3)
	ROUND(Z4, Z5, Z6, Z7)
	ROUND(Z0, Z1, Z2, Z3)
	ROUND(Z4, Z5, Z6, Z7)
	ROUND(Z0, Z1, Z2, Z3)
	ROUND(Z4, Z5, Z6, Z7)
	ROUND(Z0, Z1, Z2, Z3)
	ROUND(Z4, Z5, Z6, Z7)
	VPXORQ Z1, Z0, Z0
	VPXORQ Z3, Z2, Z2
	VPXORQ Z2, Z0, Z0
	VPXORQ Z5, Z4, Z4
	VPXORQ Z7, Z6, Z6
	VPXORQ Z6, Z4, Z4
	VMOVDQU64 Z0, 0(DI)
	VMOVDQU64 Z4, 64(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $16, CX
	JNZ  loop
	VZEROUPPER
	RET
