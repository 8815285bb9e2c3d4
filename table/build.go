package table

import (
	"bytes"
	"fmt"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Builder holds a table and the per-row state that lets one-backend changes
// be applied in O(rows) rather than rebuilding every score.
//
// Each row's ranking R orders the non-inactive backends by ascending score
// (ties, which need a 64-bit collision, by address). A row only depends on
// three members of R: R[0], R[1] and the first good backend G. The primary is
// G; the secondary is R[0] when G is not R[0] (the displaced backend keeps
// its connections through second chance), otherwise R[1]. With no good
// backend the hops stay R[0], R[1]. Under GLB's invariant of at most one
// backend that is not active and healthy, this is exactly GLB's rule; with
// more it avoids GLB's dead-primary bug (glb-director#77).
type Builder struct {
	cfg     TableConfig // Backends is owned by the builder
	k0, k1  uint64
	words   []addrWords
	flags   []uint8    // per backend: flagActive, flagGood
	v4idx   []int32    // ranked IPv4 backends
	v4w     []uint64   // their final SipHash words, padded to vectorWidth
	v4tail  uint16     // which of v4w's last vectorWidth words are not padding
	v6idx   []int32    // ranked IPv6 backends
	states  []sipState // per row: SipHash state after the row seed
	ranks   []rank     // per row
	allGood bool       // every ranked backend is good: G is R[0]
	wts     []uint16   // per backend: its weight
	recips  []uint64   // per backend: its weight's reciprocal (weight.go)
	// weighted is set when the ranked backends' weights differ: ranks then
	// hold weighted keys (weight.go) rather than scores.
	weighted bool
	wmax     uint16   // the largest ranked weight
	chunkMax []uint16 // with weights: the heaviest of each vectorWidth of v4idx
	dom      []uint16 // per backend: its failure domain, numbered
	// domains is set when the ranked backends are in more than one
	// failure domain: ranks then track D, and rows follow domains.go.
	domains bool
	workers int
	vector  bool // scores in the vector unit (newBuilder)
}

// rank is the part of a row's ranking that decides its hops: R[0], R[1],
// the first good backend G and, with failure domains, D: the first backend
// whose domain is not R[0]'s.
type rank struct {
	s0, s1, sg, sd uint64
	i0, i1, ig, id int32 // backend indices, none when absent
}

const none = -1

const (
	flagActive  = 1 << iota // not inactive: ranked
	flagGood                // active or filling, and healthy: may be primary
	flagFilling             // filling: keeps GLB's secondary (domains.go)
)

func flagsOf(be Backend) uint8 {
	var f uint8
	if be.State != StateInactive {
		f |= flagActive
	}
	if be.Good() {
		f |= flagGood
	}
	if be.State == StateFilling {
		f |= flagFilling
	}
	return f
}

// NewBuilder builds a table from scratch.
func NewBuilder(tc *TableConfig) (*Builder, error) { return newBuilder(tc, haveVectorScores) }

// newBuilder is NewBuilder, scoring in the vector unit when vector is
// set (and the CPU has one): the tests compare both ways on one CPU.
func newBuilder(tc *TableConfig, vector bool) (*Builder, error) {
	if err := checkBuildable(tc.Backends); err != nil {
		return nil, err
	}
	b := &Builder{
		cfg:     *tc,
		states:  make([]sipState, Rows),
		ranks:   make([]rank, Rows),
		workers: runtime.GOMAXPROCS(0),
		vector:  vector && haveVectorScores,
	}
	b.cfg.Backends = append([]Backend(nil), tc.Backends...)
	b.k0, b.k1 = keyWords(tc.Seed)
	b.words = make([]addrWords, len(b.cfg.Backends))
	b.flags = make([]uint8, len(b.cfg.Backends))
	b.wts = make([]uint16, len(b.cfg.Backends))
	for i, be := range b.cfg.Backends {
		b.words[i] = wordsFor(AddrBytes(be.IP))
		b.flags[i] = flagsOf(be)
		b.wts[i] = be.W()
	}
	b.numberDomains()
	b.reindex()
	b.parallel(func(lo, hi int) {
		out := b.scratch()
		rowStates(b.vector, b.k0, b.k1, uint32(lo), b.states[lo:hi])
		for r := lo; r < hi; r++ {
			b.rankRow(r, out)
		}
	})
	return b, nil
}

func checkBuildable(bs []Backend) error {
	if len(bs) == 0 {
		return fmt.Errorf("no backends")
	}
	for _, be := range bs {
		if be.State != StateInactive {
			return nil
		}
	}
	return fmt.Errorf("every backend is inactive")
}

// parallelChunk is how many rows a parallel worker takes at a time.
const parallelChunk = 1024

// parallel runs f over row ranges on all CPUs. Each worker takes the next
// chunk of rows when done with one, so that a CPU the machine lends to
// something else meanwhile does not hold up the rest.
func (b *Builder) parallel(f func(lo, hi int)) {
	n := max(b.workers, 1)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(parallelChunk)) - parallelChunk
				if lo >= Rows {
					return
				}
				f(lo, min(lo+parallelChunk, Rows))
			}
		}()
	}
	wg.Wait()
}

// before reports whether backend i with score si ranks ahead of j with sj.
func (b *Builder) before(si uint64, i int32, sj uint64, j int32) bool {
	if j == none {
		return true
	}
	if si != sj {
		return si < sj
	}
	return bytes.Compare(AddrBytes(b.cfg.Backends[i].IP), AddrBytes(b.cfg.Backends[j].IP)) < 0
}

// vectorWidth is how many IPv4 scores the vector path computes per step;
// the IPv4 word list is padded to a multiple of it.
const vectorWidth = 16

// reindex splits the backends into IPv4 and IPv6 lists for rankRow. Called
// whenever the backend list changes. It reports whether the ranks' keys
// changed kind (scores or weighted keys), when every row must be ranked
// again.
func (b *Builder) reindex() (rekeyed bool) {
	b.v4idx, b.v6idx, b.v4w = b.v4idx[:0], b.v6idx[:0], b.v4w[:0]
	b.allGood = true
	was, wasDomains := b.weighted, b.domains
	b.weighted, b.wmax, b.domains = false, 0, false
	firstDom := -1
	for i := range b.words {
		if b.flags[i]&flagActive == 0 {
			continue
		}
		if b.wmax != 0 && b.wts[i] != b.wmax {
			b.weighted = true
		}
		b.wmax = max(b.wmax, b.wts[i])
		if firstDom < 0 {
			firstDom = int(b.dom[i])
		} else if int(b.dom[i]) != firstDom {
			b.domains = true
		}
		b.allGood = b.allGood && b.flags[i]&flagGood != 0
		if b.words[i].v6 {
			b.v6idx = append(b.v6idx, int32(i))
		} else {
			b.v4idx = append(b.v4idx, int32(i))
			b.v4w = append(b.v4w, b.words[i].w1)
		}
	}
	if b.weighted {
		// Heaviest first, so that each vector chunk's bound is tight
		// (rankRow); the order decides nothing else.
		slices.SortStableFunc(b.v4idx, func(x, y int32) int { return int(b.wts[y]) - int(b.wts[x]) })
		for j, i := range b.v4idx {
			b.v4w[j] = b.words[i].w1
		}
	}
	for len(b.v4w)%vectorWidth != 0 {
		b.v4w = append(b.v4w, 0) // padding; its scores are ignored
	}
	b.recips = b.recips[:0]
	for _, w := range b.wts {
		b.recips = append(b.recips, recip(w))
	}
	b.chunkMax = b.chunkMax[:0]
	for lo := 0; lo < len(b.v4idx); lo += vectorWidth {
		b.chunkMax = append(b.chunkMax, b.wts[b.v4idx[lo]])
	}
	if len(b.v4w) > 0 {
		b.v4tail = uint16(1)<<(len(b.v4idx)-(len(b.v4w)-vectorWidth)) - 1
	}
	return was != b.weighted || wasDomains != b.domains
}

// key is backend i's rank key for score h: the score itself, or with
// weights that differ, its weighted key.
func (b *Builder) key(i int32, h uint64) uint64 {
	if !b.weighted {
		return h
	}
	return keyFor(expScore(h), b.recips[i])
}

// bound is the score at or under which a backend may have a key at or
// under k: scores over it need not be looked at.
func (b *Builder) bound(k uint64) uint64 {
	if !b.weighted {
		return k
	}
	return scoreBound(k, b.wmax)
}

// scratch is a per-worker buffer for rankRow: the scores, then the
// vector path's masks (a bit per score).
func (b *Builder) scratch() []uint64 { return make([]uint64, len(b.v4w)+len(b.v4w)/vectorWidth/4+1) }

// rankRow recomputes row r's rank from every ranked backend. This loop is
// the whole cost of a full build: IPv4 scores are computed in bulk (vector
// instructions where the CPU has them, two interleaved hashes otherwise) and
// the rank is only touched when a score is among the best so far.
func (b *Builder) rankRow(r int, out []uint64) {
	rk := emptyRank
	st := b.states[r]
	consider := func(h uint64, i int32) {
		s := b.key(i, h)
		good := b.flags[i]&flagGood != 0
		if s <= rk.s1 || (good && s <= rk.sg) || (b.domains && s <= rk.sd) {
			b.insert(&rk, s, i, good)
		}
	}
	if b.allGood && b.vector && len(b.v6idx) == 0 && !b.weighted && !b.domains {
		b.rankRowGood(r, out)
		return
	}
	w := b.v4w
	if b.vector && len(w) > 0 {
		// The first vectorWidth backends are ranked one by one; the rest
		// are scored with their comparison against the threshold that
		// gives (the worst score that still matters: the second best, or
		// the best good one when that is worse), which can only fall,
		// done in the vector unit: only flagged scores are looked at.
		n := len(b.v4idx)
		masks := out[len(w):]
		m16 := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(masks))), len(w)/vectorWidth)
		head := min(vectorWidth, len(w))
		vectorScores(&st, w[:head], out[:head], ^uint64(0), m16[:1])
		for j := 0; j < min(head, n); j++ {
			consider(out[j], b.v4idx[j])
		}
		if b.weighted {
			// Chunk by chunk, heaviest weights first (reindex sorted
			// them), each chunk's bound from its own heaviest weight and
			// the threshold as it stands: light backends need far
			// smaller scores to matter.
			for c := 1; c*vectorWidth < len(w); c++ {
				lo := c * vectorWidth
				vectorScores(&st, w[lo:lo+vectorWidth], out[lo:lo+vectorWidth], scoreBound(b.threshold(&rk), b.chunkMax[c]), m16[c:c+1])
				for m := m16[c]; m != 0; m &= m - 1 {
					if j := lo + bits.TrailingZeros16(m); j < n {
						consider(out[j], b.v4idx[j])
					}
				}
			}
		} else if len(w) > head {
			vectorScores(&st, w[head:], out[head:len(w)], b.threshold(&rk), m16[1:])
			for k, m := range m16[1:] {
				for m != 0 {
					j := head + k*vectorWidth + bits.TrailingZeros16(m)
					m &= m - 1
					if j < n {
						consider(out[j], b.v4idx[j])
					}
				}
			}
		}
	} else {
		j := 0
		for ; j+1 < len(b.v4idx); j += 2 {
			sa, sb := score2v4(st, w[j], w[j+1])
			consider(sa, b.v4idx[j])
			consider(sb, b.v4idx[j+1])
		}
		if j < len(b.v4idx) {
			consider(b.words[b.v4idx[j]].score(st), b.v4idx[j])
		}
	}
	for _, i := range b.v6idx {
		consider(b.words[i].score(st), i)
	}
	b.ranks[r] = rk
}

// rankRowGood is rankRow for the usual case, made fast: every ranked
// backend is good and IPv4, and the vector unit scores. G is then R[0],
// so only the best two are kept. The vector unit also finds the second
// best score and flags the scores at or under it, so Go looks at two
// scores a row (more only on a tie).
func (b *Builder) rankRowGood(r int, out []uint64) {
	s0, s1 := ^uint64(0), ^uint64(0)
	i0, i1 := int32(none), int32(none)
	w, idx := b.v4w, b.v4idx
	n := len(idx)
	if len(w) > 0 {
		masks := out[len(w):]
		vectorBest2(&b.states[r], w, out[:len(w)], b.v4tail, masks)
		for k, m := range masks[:(len(w)+63)/64] {
			for m != 0 {
				j := k*64 + bits.TrailingZeros64(m)
				m &= m - 1
				if j >= n {
					break // padding, flagged when there are fewer than two backends
				}
				s, i := out[j], idx[j]
				if s < s1 || (s == s1 && b.before(s, i, s1, i1)) {
					if s < s0 || (s == s0 && b.before(s, i, s0, i0)) {
						s1, i1, s0, i0 = s0, i0, s, i
					} else {
						s1, i1 = s, i
					}
				}
			}
		}
	}
	b.ranks[r] = rank{s0: s0, s1: s1, sg: s0, sd: ^uint64(0), i0: i0, i1: i1, ig: i0, id: none}
}

// emptyRank is a row's rank before any backend is considered.
var emptyRank = rank{s0: ^uint64(0), s1: ^uint64(0), sg: ^uint64(0), sd: ^uint64(0), i0: none, i1: none, ig: none, id: none}

// threshold is the worst key that can still change a rank: keys over it
// need not be looked at.
func (b *Builder) threshold(rk *rank) uint64 {
	t := max(rk.s1, rk.sg)
	if b.domains {
		t = max(t, rk.sd)
	}
	return t
}

// insert adds backend i with key s to a rank.
func (b *Builder) insert(rk *rank, s uint64, i int32, good bool) {
	if b.before(s, i, rk.s0, rk.i0) {
		// The old R[0] is now the best outside i's domain if it is not
		// in it; else D, the best outside that domain, stays.
		if b.domains && rk.i0 != none && b.dom[rk.i0] != b.dom[i] {
			rk.sd, rk.id = rk.s0, rk.i0
		}
		rk.s1, rk.i1 = rk.s0, rk.i0
		rk.s0, rk.i0 = s, i
	} else {
		if b.before(s, i, rk.s1, rk.i1) {
			rk.s1, rk.i1 = s, i
		}
		if b.domains && b.dom[i] != b.dom[rk.i0] && b.before(s, i, rk.sd, rk.id) {
			rk.sd, rk.id = s, i
		}
	}
	if good && b.before(s, i, rk.sg, rk.ig) {
		rk.sg, rk.ig = s, i
	}
}

// hops applies the row rule to a rank: GLB's (docs/tables.md), or with
// failure domains its domain form (domains.go).
func (b *Builder) hops(rk *rank) Row {
	if b.domains {
		return b.domainHops(rk)
	}
	p, s := rk.i0, rk.i1
	if rk.ig != none && rk.ig != rk.i0 {
		p, s = rk.ig, rk.i0
	}
	if s == none {
		s = p // a single backend is both hops
	}
	return Row{uint32(p), uint32(s)}
}

// Table returns a snapshot of the current table.
func (b *Builder) Table() *Table {
	t := &Table{
		Name:     b.cfg.Name,
		HashKey:  b.cfg.HashKey,
		Binds:    append([]Bind(nil), b.cfg.Binds...),
		Backends: append([]Backend(nil), b.cfg.Backends...),
		Rows:     make([]Row, Rows),
		QUIC:     b.cfg.QUIC,
		History:  b.cfg.History,
	}
	for r := range b.ranks {
		t.Rows[r] = b.hops(&b.ranks[r])
		if b.ranks[r].ig == none {
			t.NoGoodRows++
		}
	}
	if b.cfg.Balance != 0 {
		t.Balance = b.cfg.Balance
		b.balance(t.Rows)
	}
	t.Digest = InputDigest(&b.cfg, t.Rows, Fingerprint(t))
	return t
}

// Config returns the config the builder's table currently reflects.
func (b *Builder) Config() TableConfig {
	c := b.cfg
	c.Backends = append([]Backend(nil), b.cfg.Backends...)
	c.Binds = append([]Bind(nil), b.cfg.Binds...)
	return c
}
