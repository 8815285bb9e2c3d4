//go:build !amd64 || purego

package table

var haveVectorScores = false

func vectorScores(st *sipState, w, out []uint64, thr uint64, masks []uint16) { panic("unreachable") }

func vectorBest2(st *sipState, w, out []uint64, tail uint16, masks []uint64) { panic("unreachable") }

// rowStates fills out with the states of rows from, from+1, ... (rowState).
func rowStates(_ bool, k0, k1 uint64, from uint32, out []sipState) {
	for i := range out {
		out[i] = rowState(k0, k1, from+uint32(i))
	}
}
