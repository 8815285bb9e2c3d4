package table

import (
	"math"
	"math/bits"
)

// Weighted rendezvous. GLB ranks a row's backends by their SipHash scores
// h, lowest first. With weights, backend i's key is E(h)/w_i, where E(h)
// is -log2(u) for u = 1 - h/2^64 in (0,1]: for uniform h, E is
// exponentially distributed, and the lowest of E_i/w_i is backend i with
// probability w_i / Σw. E is increasing in h, so with equal weights the
// keys order the backends as their scores do; a table whose ranked
// backends all have one weight is built from the scores alone and is
// GLB's, byte for byte.
//
// E is computed in integers, from a table the package computes in
// integers too, so that every director, whatever its CPU, builds the same
// rows: a fleet's tables must agree bit for bit, and floating point's last
// bit may differ between architectures.

const (
	logFracBits  = 50 // E's fraction bits
	logTableBits = 12 // the table's resolution: log2(1 + i/4096)
	logInterp    = 20 // bits of the mantissa interpolated between entries
	// keyShift scales E before the division by the weight: E < 2^57, so
	// E << 6 fits 64 bits, and the key keeps 56 bits of precision at weight
	// 65535.
	keyShift = 6
)

// log2Table[i] is log2(1 + i/2^logTableBits) in Q0.logFracBits.
var log2Table = func() (t [1<<logTableBits + 1]uint64) {
	for i := range 1 << logTableBits {
		// Bit by bit: square the mantissa; past 2, a one bit, and halve.
		m := uint64(1<<logTableBits+i) << (62 - logTableBits) // Q1.62
		var f uint64
		for range logFracBits {
			hi, lo := bits.Mul64(m, m) // Q2.124
			m = hi<<2 | lo>>62
			f <<= 1
			if m >= 1<<63 {
				f |= 1
				m >>= 1
			}
		}
		t[i] = f
	}
	t[1<<logTableBits] = 1 << logFracBits
	return t
}()

// expScore is E(h) = -log2(1 - h/2^64) in Q.logFracBits: 0 for h = 0,
// at most 64 << logFracBits. It never decreases as h grows.
func expScore(h uint64) uint64 {
	if h == 0 {
		return 0
	}
	y := -h // 2^64 - h, in [1, 2^64)
	p := 63 - bits.LeadingZeros64(y)
	m := y << (63 - p) // top bit set: the mantissa in Q1.63
	idx := (m >> (63 - logTableBits)) & (1<<logTableBits - 1)
	rem := (m >> (63 - logTableBits - logInterp)) & (1<<logInterp - 1)
	lo, hi := log2Table[idx], log2Table[idx+1]
	f := lo + (hi-lo)*rem>>logInterp
	return uint64(64-p)<<logFracBits - f
}

// weightedKey is backend's rank key for score h at weight w: E(h)/w,
// scaled. Lower ranks first, as scores do.
func weightedKey(h uint64, w uint16) uint64 { return keyFor(expScore(h), recip(w)) }

// recip is w's reciprocal for keyFor: a multiplication is a fraction of a
// division's cost, and the build makes one a score.
func recip(w uint16) uint64 { return ^uint64(0) / uint64(max(w, 1)) }

// keyFor is E/w, scaled by 2^keyShift, from w's reciprocal.
func keyFor(e, r uint64) uint64 {
	hi, _ := bits.Mul64(e<<keyShift, r)
	return hi
}

// scoreBound is a score at or above which no backend of weight at most
// wmax can have a key under k: the rows' vector pass compares scores with
// it to skip the backends that cannot matter. A key under k needs
// E(h) < (k+2)·wmax/2^keyShift =: e, that is 1 - 2^(-e) > h/2^64; and
// 1 - 2^(-x) <= x·ln 2, so h < x·ln 2 · 2^64 with x = e in log2 units
// bounds it without an exponential (a build asks for millions of bounds).
// The margin (2^-20 of x, and more) covers E's error (under 2^-27) and
// rounding: the bound only decides what is looked at, never what is
// chosen.
func scoreBound(k uint64, wmax uint16) uint64 {
	if k == ^uint64(0) {
		return ^uint64(0)
	}
	e := (float64(k) + 2) * float64(wmax) / (1 << keyShift)
	x := e/(1<<logFracBits)*(1+1.0/(1<<20)) + 1.0/(1<<20)
	hb := x * math.Ln2 * (1 << 64)
	if hb >= 1<<64 {
		return ^uint64(0)
	}
	return uint64(hb)
}
