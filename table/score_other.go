//go:build !amd64 || purego

package table

var haveVectorScores = false

func vectorScores(st *sipState, w, out []uint64, thr uint64, masks []uint16) { panic("unreachable") }
