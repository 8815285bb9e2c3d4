//go:build !purego

package table

import "golang.org/x/sys/cpu"

// scoresV4AVX512 is in score_amd64.s.
//
//go:noescape
func scoresV4AVX512(st *sipState, w *uint64, out *uint64, n int)

// haveVectorScores is a variable so tests can run the portable path too.
var haveVectorScores = cpu.X86.HasAVX512F

// vectorScores finishes the SipHash of every IPv4 final word in w (len a
// multiple of vectorWidth) into out, eight lanes at a time.
func vectorScores(st *sipState, w, out []uint64) {
	if len(w) > 0 {
		scoresV4AVX512(st, &w[0], &out[0], len(w))
	}
}
