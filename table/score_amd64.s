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

// A score's first round, on its state after the row seed (v0-v3 in
// Z16-Z19) and its message word m: v0 and v1 do not depend on m until
// halfway through, so that part is computed once a call (SHARED1: Z24, Z25,
// Z26) and each lane does ten instructions rather than fifteen.
#define SHARED1 \
	VPADDQ Z17, Z16, Z26; \
	VPROLQ $13, Z17, Z24; \
	VPXORQ Z26, Z24, Z24; \
	VPROLQ $32, Z26, Z26; \
	VPROLQ $17, Z24, Z25

#define FIRST(m, v0, v1, v2, v3) \
	VPXORQ m, Z19, v3; \
	VPADDQ v3, Z18, v2; \
	VPROLQ $16, v3, v3; \
	VPXORQ v2, v3, v3; \
	VPADDQ v3, Z26, v0; \
	VPROLQ $21, v3, v3; \
	VPXORQ v0, v3, v3; \
	VPADDQ Z24, v2, v2; \
	VPXORQ v2, Z25, v1; \
	VPROLQ $32, v2, v2

// A score's last round and output, v0^v1^v2^v3, into v0. Of the round's
// new v0 and v3, only their xor is needed, and the new v0 cancels out of
// it: five instructions fewer than ROUND and three xors.
#define LAST(v0, v1, v2, v3) \
	VPADDQ v1, v0, v0; \
	VPROLQ $13, v1, v1; \
	VPXORQ v0, v1, v1; \
	VPADDQ v3, v2, v2; \
	VPROLQ $16, v3, v3; \
	VPXORQ v2, v3, v3; \
	VPROLQ $21, v3, v3; \
	VPADDQ v1, v2, v2; \
	VPROLQ $17, v1, v1; \
	VPROLQ $32, v2, v0; \
	VPTERNLOGQ $0x96, v2, v1, v0; \
	VPXORQ v3, v0, v0

// SCORES16 scores the sixteen final message words at SI into Z0 (the
// first eight) and Z4 (the next eight), as big-endian integers, from the
// row state in Z16-Z19 (SHARED1 done), 0xff in every lane of Z20 and the
// byte reversal in Z21. Two groups of eight lanes are interleaved to hide
// the rounds' latency.
#define SCORES16 \
	VMOVDQU64 0(SI), Z8; \
	VMOVDQU64 64(SI), Z9; \
	FIRST(Z8, Z0, Z1, Z2, Z3); \
	FIRST(Z9, Z4, Z5, Z6, Z7); \
	ROUND(Z0, Z1, Z2, Z3); \
	ROUND(Z4, Z5, Z6, Z7); \
	VPXORQ Z8, Z0, Z0; \
	VPXORQ Z9, Z4, Z4; \
	VPXORQ Z20, Z2, Z2; \
	VPXORQ Z20, Z6, Z6; \
	ROUND(Z0, Z1, Z2, Z3); \
	ROUND(Z4, Z5, Z6, Z7); \
	ROUND(Z0, Z1, Z2, Z3); \
	ROUND(Z4, Z5, Z6, Z7); \
	ROUND(Z0, Z1, Z2, Z3); \
	ROUND(Z4, Z5, Z6, Z7); \
	LAST(Z0, Z1, Z2, Z3); \
	LAST(Z4, Z5, Z6, Z7); \
	VPSHUFB Z21, Z0, Z0; \
	VPSHUFB Z21, Z4, Z4

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

// ROWSETUP loads what SCORES16 needs: the row state at AX in every lane
// of Z16-Z19 (and SHARED1), 0xff in Z20 and the byte reversal in Z21.
// It clobbers BX.
#define ROWSETUP \
	VPBROADCASTQ 0(AX), Z16; \
	VPBROADCASTQ 8(AX), Z17; \
	VPBROADCASTQ 16(AX), Z18; \
	VPBROADCASTQ 24(AX), Z19; \
	SHARED1; \
	MOVQ $0xff, BX; \
	VPBROADCASTQ BX, Z20; \
	VMOVDQU64 bswap64<>(SB), Z21

// func scoresV4AVX512(st *sipState, w *uint64, out *uint64, n int, thr uint64, masks *uint16)
//
// For each of n (a multiple of 16) final message words w[i], finishes the
// SipHash whose state after the row seed is st: out[i] = the score (the
// SipHash output read big-endian), and bit i%16 of masks[i/16] set when
// out[i] <= thr.
TEXT ·scoresV4AVX512(SB), NOSPLIT, $0-48
	MOVQ st+0(FP), AX
	MOVQ w+8(FP), SI
	MOVQ out+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ masks+40(FP), R8
	ROWSETUP
	MOVQ thr+32(FP), BX
	VPBROADCASTQ BX, Z22

loop:
	SCORES16
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

// Merges the per-lane two best (m1, m2) with (p1, p2): m1 becomes the
// lanes' best, m2 their second best of the four. t is clobbered.
#define MERGE2(m1, m2, p1, p2, t) \
	VPMAXUQ p1, m1, t; \
	VPMINUQ p1, m1, m1; \
	VPMINUQ p2, m2, m2; \
	VPMINUQ t, m2, m2

// func best2V4AVX512(st *sipState, w *uint64, out *uint64, n int, tail uint16, masks *byte)
//
// scoresV4AVX512 for the usual row (every backend good), with no
// threshold given: it is found here. For each of n (a multiple of 16)
// final message words w[i], out[i] = the score; lanes of the last 16 not
// set in tail are padding and score as ^0. Then bit i%8 of masks[i/8] is
// set when out[i] is at most the row's second best score (counting equal
// scores twice), so that the two best, and any ties with them, are all Go
// looks at. Each lane keeps its two best in the loop (three instructions
// per eight scores); a shuffle tree merges the lanes at the end.
TEXT ·best2V4AVX512(SB), NOSPLIT, $0-48
	MOVQ st+0(FP), AX
	MOVQ w+8(FP), SI
	MOVQ out+16(FP), DI
	MOVQ n+24(FP), CX
	MOVWLZX tail+32(FP), BX
	MOVQ masks+40(FP), R8
	KMOVW BX, K3
	KNOTW K3, K3
	KSHIFTRW $8, K3, K4
	ROWSETUP
	MOVQ $-1, BX
	VPBROADCASTQ BX, Z22
	VMOVDQA64 Z22, Z10
	VMOVDQA64 Z22, Z11
	VMOVDQA64 Z22, Z12
	VMOVDQA64 Z22, Z13
	MOVQ DI, R9
	MOVQ CX, R10

loop2:
	SCORES16
	CMPQ CX, $16
	JNE  full
	VPORQ Z22, Z0, K3, Z0
	VPORQ Z22, Z4, K4, Z4

full:
	VMOVDQU64 Z0, 0(DI)
	VMOVDQU64 Z4, 64(DI)
	VPMAXUQ Z0, Z10, Z14
	VPMINUQ Z0, Z10, Z10
	VPMINUQ Z14, Z11, Z11
	VPMAXUQ Z4, Z12, Z23
	VPMINUQ Z4, Z12, Z12
	VPMINUQ Z23, Z13, Z13
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $16, CX
	JNZ  loop2

	// The two best of all sixteen lanes, in every lane of Z10, Z11.
	MERGE2(Z10, Z11, Z12, Z13, Z14)
	VSHUFI64X2 $0x4e, Z10, Z10, Z12
	VSHUFI64X2 $0x4e, Z11, Z11, Z13
	MERGE2(Z10, Z11, Z12, Z13, Z14)
	VSHUFI64X2 $0xb1, Z10, Z10, Z12
	VSHUFI64X2 $0xb1, Z11, Z11, Z13
	MERGE2(Z10, Z11, Z12, Z13, Z14)
	VPSHUFD $0x4e, Z10, Z12
	VPSHUFD $0x4e, Z11, Z13
	MERGE2(Z10, Z11, Z12, Z13, Z14)

flag:
	VMOVDQU64 0(R9), Z0
	VMOVDQU64 64(R9), Z4
	VPCMPUQ   $2, Z11, Z0, K1
	VPCMPUQ   $2, Z11, Z4, K2
	KMOVB     K1, AX
	KMOVB     K2, BX
	MOVB      AX, 0(R8)
	MOVB      BX, 1(R8)
	ADDQ $128, R9
	ADDQ $2, R8
	SUBQ $16, R10
	JNZ  flag
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
