//go:build !purego

package table

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// scoresV4AVX512 is in score_amd64.s.
//
//go:noescape
func scoresV4AVX512(st *sipState, w *uint64, out *uint64, n int, thr uint64, masks *uint16)

// haveVectorScores is whether the CPU has the vector unit the fast scorers
// need; a Builder's vector field says whether it uses it.
// VPSHUFB on 512-bit vectors needs AVX-512 BW.
var haveVectorScores = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW

// vectorScores finishes the SipHash of every IPv4 final word in w (len a
// multiple of vectorWidth) into out, as scores (read big-endian), and
// flags in masks (a bit per score, vectorWidth to a mask) those at most
// thr.
func vectorScores(st *sipState, w, out []uint64, thr uint64, masks []uint16) {
	if len(w) > 0 {
		_ = masks[len(w)/vectorWidth-1]
		scoresV4AVX512(st, &w[0], &out[0], len(w), thr, &masks[0])
	}
}

// best2V4AVX512 is in score_amd64.s.
//
//go:noescape
func best2V4AVX512(st *sipState, w *uint64, out *uint64, n int, tail uint16, masks *byte)

// vectorBest2 is vectorScores for a row whose backends are all good: it
// scores every IPv4 final word in w (len a multiple of vectorWidth) into
// out and flags in masks (a bit per score, 64 to a word) those at most
// the second best score. Lanes of the last vectorWidth words not set in
// tail are padding; they never count as best.
func vectorBest2(st *sipState, w, out []uint64, tail uint16, masks []uint64) {
	if len(w) > 0 {
		_ = masks[(len(w)-1)/64]
		best2V4AVX512(st, &w[0], &out[0], len(w), tail, (*byte)(unsafe.Pointer(&masks[0])))
	}
}

// rowStatesAVX512 is in score_amd64.s.
//
//go:noescape
func rowStatesAVX512(k *[2]uint64, row uint32, out *[4][8]uint64)

// rowStates fills out with the states of rows from, from+1, ... (rowState),
// eight at a time in the vector unit when vector is set.
func rowStates(vector bool, k0, k1 uint64, from uint32, out []sipState) {
	i := 0
	if vector && haveVectorScores {
		k := [2]uint64{k0, k1}
		var v [4][8]uint64
		for ; i+8 <= len(out); i += 8 {
			rowStatesAVX512(&k, from+uint32(i), &v)
			for l := range 8 {
				out[i+l] = sipState{v[0][l], v[1][l], v[2][l], v[3][l]}
			}
		}
	}
	for ; i < len(out); i++ {
		out[i] = rowState(k0, k1, from+uint32(i))
	}
}
