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

// Byte reversal of each 64-bit lane, for VPSHUFB: scores are read as
// big-endian integers.
DATA bswap64<>+0x00(SB)/8, $0x0001020304050607
DATA bswap64<>+0x08(SB)/8, $0x08090a0b0c0d0e0f
DATA bswap64<>+0x10(SB)/8, $0x0001020304050607
DATA bswap64<>+0x18(SB)/8, $0x08090a0b0c0d0e0f
DATA bswap64<>+0x20(SB)/8, $0x0001020304050607
DATA bswap64<>+0x28(SB)/8, $0x08090a0b0c0d0e0f
DATA bswap64<>+0x30(SB)/8, $0x0001020304050607
DATA bswap64<>+0x38(SB)/8, $0x08090a0b0c0d0e0f
GLOBL bswap64<>(SB), RODATA|NOPTR, $64

// func scoresV4AVX512(st *sipState, w *uint64, out *uint64, n int, thr uint64, masks *uint16)
//
// For each of n (a multiple of 16) final message words w[i], finishes the
// SipHash whose state after the row seed is st: out[i] = the score (the
// SipHash output read big-endian), and bit i%16 of masks[i/16] set when
// out[i] <= thr. Two groups of eight lanes are interleaved to hide the
// rounds' latency.
TEXT ·scoresV4AVX512(SB), NOSPLIT, $0-48
	MOVQ st+0(FP), AX
	MOVQ w+8(FP), SI
	MOVQ out+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ masks+40(FP), R8
	VPBROADCASTQ 0(AX), Z16
	VPBROADCASTQ 8(AX), Z17
	VPBROADCASTQ 16(AX), Z18
	VPBROADCASTQ 24(AX), Z19
	MOVQ $0xff, BX
	VPBROADCASTQ BX, Z20
	VMOVDQU64 bswap64<>(SB), Z21
	MOVQ thr+32(FP), BX
	VPBROADCASTQ BX, Z22

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
	VPSHUFB   Z21, Z0, Z0
	VPSHUFB   Z21, Z4, Z4
	VMOVDQU64 Z0, 0(DI)
	VMOVDQU64 Z4, 64(DI)
	VPCMPUQ   $2, Z22, Z0, K1
	VPCMPUQ   $2, Z22, Z4, K2
	KMOVB     K1, AX
	KMOVB     K2, BX
	SHLL      $8, BX
	ORL       BX, AX
	MOVW      AX, 0(R8)
	ADDQ $128, SI
	ADDQ $128, DI
	ADDQ $2, R8
	SUBQ $16, CX
	JNZ  loop
	VZEROUPPER
	RET

// A fresh state (Z0-Z3, from the initial one in Z16-Z19) that has
// compressed the message words in m.
#define FRESH_COMPRESS(m) \
	VMOVDQA64 Z16, Z0; \
	VMOVDQA64 Z17, Z1; \
	VMOVDQA64 Z18, Z2; \
	VPXORQ    m, Z19, Z3; \
	ROUND(Z0, Z1, Z2, Z3); \
	ROUND(Z0, Z1, Z2, Z3); \
	VPXORQ m, Z0, Z0

// func rowStatesAVX512(k *[2]uint64, row uint32, out *[4][8]uint64)
//
// The states of rows row to row+7 (rowState), lane i for row+i, each
// state word in its own vector: out[j][i] is row+i's vj.
TEXT ·rowStatesAVX512(SB), NOSPLIT, $0-24
	MOVQ k+0(FP), AX
	MOVL row+8(FP), BX
	MOVQ out+16(FP), DI
	// The initial state, for both hashes.
	MOVQ 0(AX), CX
	MOVQ $0x736f6d6570736575, DX
	XORQ CX, DX
	VPBROADCASTQ DX, Z16
	MOVQ $0x6c7967656e657261, DX
	XORQ CX, DX
	VPBROADCASTQ DX, Z18
	MOVQ 8(AX), CX
	MOVQ $0x646f72616e646f6d, DX
	XORQ CX, DX
	VPBROADCASTQ DX, Z17
	MOVQ $0x7465646279746573, DX
	XORQ CX, DX
	VPBROADCASTQ DX, Z19
	// The seed message of row+i: 4<<56 | bswap32(row+i).
	VPBROADCASTD BX, Y8
	VPADDD    rowlanes<>(SB), Y8, Y8
	VPSHUFB   bswap32<>(SB), Y8, Y8
	VPMOVZXDQ Y8, Z8
	MOVQ $0x0400000000000000, DX
	VPBROADCASTQ DX, Z9
	VPORQ Z9, Z8, Z8
	// rowSeed: compress, finalize.
	FRESH_COMPRESS(Z8)
	MOVQ $0xff, DX
	VPBROADCASTQ DX, Z9
	VPXORQ Z9, Z2, Z2
	ROUND(Z0, Z1, Z2, Z3)
	ROUND(Z0, Z1, Z2, Z3)
	ROUND(Z0, Z1, Z2, Z3)
	ROUND(Z0, Z1, Z2, Z3)
	VPXORQ Z1, Z0, Z8
	VPXORQ Z3, Z2, Z9
	VPXORQ Z9, Z8, Z8
	// The row's state: a fresh one compresses the seed.
	FRESH_COMPRESS(Z8)
	VMOVDQU64 Z0, 0(DI)
	VMOVDQU64 Z1, 64(DI)
	VMOVDQU64 Z2, 128(DI)
	VMOVDQU64 Z3, 192(DI)
	VZEROUPPER
	RET

// 0..7, the lane offsets of the rows.
DATA rowlanes<>+0x00(SB)/8, $0x0000000100000000
DATA rowlanes<>+0x08(SB)/8, $0x0000000300000002
DATA rowlanes<>+0x10(SB)/8, $0x0000000500000004
DATA rowlanes<>+0x18(SB)/8, $0x0000000700000006
GLOBL rowlanes<>(SB), RODATA|NOPTR, $32

// Byte reversal of each 32-bit lane.
DATA bswap32<>+0x00(SB)/8, $0x0405060700010203
DATA bswap32<>+0x08(SB)/8, $0x0c0d0e0f08090a0b
DATA bswap32<>+0x10(SB)/8, $0x0405060700010203
DATA bswap32<>+0x18(SB)/8, $0x0c0d0e0f08090a0b
GLOBL bswap32<>(SB), RODATA|NOPTR, $32
