//go:build !purego

package table

import "golang.org/x/sys/cpu"

// scoresV4AVX512 is in score_amd64.s.
//
//go:noescape
func scoresV4AVX512(st *sipState, w *uint64, out *uint64, n int, thr uint64, masks *uint16)

// haveVectorScores is a variable so tests can run the portable path too.
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
