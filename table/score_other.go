//go:build !amd64 || purego

package table

var haveVectorScores = false

func vectorScores(st *sipState, w, out []uint64) { panic("unreachable") }
