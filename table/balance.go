package table

import "math/bits"

// Bounded load (a table's balance_factor F). Rendezvous gives each backend
// its fair share of primary rows only on average: with 256 equal backends
// the busiest has about 15% more than the mean. With F set, no good
// backend is primary for more than its cap,
//
//	cap = max(⌈share⌉, ⌊F × share⌋), share = Rows × weight / Σ weights of the good backends,
//
// so the busiest has at most F times its share.
//
// The table is first built as without F; then rows of backends over their
// cap swap their two hops: the secondary becomes the primary and the old
// primary the secondary. A row is only swapped when both its hops are good
// (either may be primary). So every row keeps the pair of hops it has
// without F, and only their order differs. What follows from that:
//   - Turning F on or off, or changing it, only swaps hops within rows: no
//     row is ever at risk, since each row's old primary is one of its hops.
//   - A change that keeps connections without F keeps them with F wherever
//     the old primary was the row's first choice; draining a backend and
//     then removing it is such a change (a row is never swapped onto a
//     backend that is not good). Adding a backend can take a swapped row's
//     old primary, its second choice, out of the pair: such rows are at risk
//     and the change is judged as any other that puts rows at risk (plan
//     proposes a balance ramp: ramp.go).
//
// Which rows swap: among the rows of backends over their cap, those whose
// two hops' keys are closest first (by closeness: the rows that nearly
// chose their secondary anyway), each only while its primary is over its
// cap and its secondary under its own. Where that leaves a backend over its cap (its
// rows' secondaries are all full), chains of swaps through full backends
// move rows on to one with room. The order depends only on the keys, so a
// change that alters few rows' ranks alters few swaps. Everything is in
// integers: every director builds the same rows.

// BalanceScale is the fixed-point scale of a balance factor: Balance 1010
// is F = 1.01.
const BalanceScale = 1000

// MinBalance and MaxBalance bound a balance factor, as Balance.
const (
	MinBalance = 1 * BalanceScale
	MaxBalance = 2 * BalanceScale
)

// Caps returns each backend's cap on primary rows under balance factor f
// (in BalanceScale units): 0 for backends that are not good, which are
// never primary where a good one exists. Nil when f is 0 (off) or no
// backend is good.
func Caps(bs []Backend, f uint16) []int {
	if f == 0 {
		return nil
	}
	var sum uint64
	for _, b := range bs {
		if b.Good() {
			sum += uint64(b.W())
		}
	}
	if sum == 0 {
		return nil
	}
	caps := make([]int, len(bs))
	for i, b := range bs {
		if !b.Good() {
			continue
		}
		w := uint64(b.W())
		fair := (Rows*w + sum - 1) / sum                             // ⌈share⌉
		bound := Rows * w * uint64(f) / (sum * uint64(BalanceScale)) // ⌊F × share⌋
		caps[i] = int(max(fair, bound))
	}
	return caps
}

// keyOf is backend i's key in rank rk, for one of its members.
func keyOf(rk *rank, i int32) uint64 {
	switch i {
	case rk.i0:
		return rk.s0
	case rk.i1:
		return rk.s1
	case rk.ig:
		return rk.sg
	case rk.id:
		return rk.sd
	}
	return ^uint64(0)
}

// closeness is how close a row's hops' keys are, m their difference, as a
// 12-bit code that never decreases as m grows: m itself below 64, else its
// bit length then the 5 bits after its leading one (a relative resolution
// of 1/32; codes from 224 to 2,079). Rows of one code keep row order.
func closeness(m uint64) int {
	e := bits.Len64(m)
	if e <= 6 {
		return int(m)
	}
	return e<<5 | int(m>>(e-6)&31)
}

// noCandidate marks a row that is not a swap candidate.
const noCandidate = 0xffff

// balance swaps hops in rows (the table's rows as built without F) until
// no good backend is primary for more than its cap, where that can be
// done.
func (b *Builder) balance(rows []Row) {
	caps := Caps(b.cfg.Backends, b.cfg.Balance)
	if caps == nil {
		return
	}
	n := len(b.cfg.Backends)
	count := make([]int, n)
	for _, r := range rows {
		count[r.Primary]++
	}
	over := false
	for i, c := range count {
		if b.good(int32(i)) && c > caps[i] {
			over = true
		}
	}
	if !over {
		return
	}
	swappable := func(r Row) bool {
		return r.Primary != r.Secondary && b.good(int32(r.Primary)) && b.good(int32(r.Secondary))
	}
	// The candidates in order of closeness, then row: a counting sort
	// of the rows by their closeness code.
	code := make([]uint16, Rows)
	var start [1 << 12]int32
	some := false
	for r := range rows {
		row := rows[r]
		if !swappable(row) || count[row.Primary] <= caps[row.Primary] {
			code[r] = noCandidate
			continue
		}
		rk := &b.ranks[r]
		c := closeness(keyOf(rk, int32(row.Secondary)) - keyOf(rk, int32(row.Primary)))
		code[r] = uint16(c)
		start[c]++
		some = true
	}
	if !some {
		return
	}
	pos := int32(0)
	for c, k := range start {
		start[c] = pos
		pos += k
	}
	cands := make([]int32, pos)
	for r, c := range code {
		if c != noCandidate {
			cands[start[c]] = int32(r)
			start[c]++
		}
	}
	for _, r := range cands {
		row := &rows[r]
		p, s := row.Primary, row.Secondary
		if count[p] > caps[p] && count[s] < caps[s] {
			row.Primary, row.Secondary = s, p
			count[p]--
			count[s]++
		}
	}
	b.balanceChains(rows, count, caps, swappable)
}

// balanceChains moves rows from backends still over their cap along
// shortest chains of swaps (each through a backend at its cap, which
// gives one row on as it takes one) to a backend under its cap.
func (b *Builder) balanceChains(rows []Row, count, caps []int, swappable func(Row) bool) {
	n := len(count)
	edge := make([]int32, n*n) // edge[u*n+v]: a row with primary u that may swap to v, +1; 0 none
	from := make([]int32, n)
	queue := make([]int32, 0, n)
	for {
		var start []int32
		for i, c := range count {
			if b.good(int32(i)) && c > caps[i] {
				start = append(start, int32(i))
			}
		}
		if len(start) == 0 {
			return
		}
		clear(edge)
		for r, row := range rows {
			if swappable(row) {
				e := &edge[int(row.Primary)*n+int(row.Secondary)]
				if *e == 0 {
					*e = int32(r) + 1
				}
			}
		}
		moved := false
		for _, u := range start {
			if count[u] <= caps[u] {
				continue
			}
			// Breadth first from u to a backend with room.
			for i := range from {
				from[i] = -1
			}
			from[u] = u
			queue = append(queue[:0], u)
			end := int32(-1)
			for len(queue) > 0 && end < 0 {
				x := queue[0]
				queue = queue[1:]
				for v := int32(0); v < int32(n); v++ {
					if from[v] >= 0 || edge[int(x)*n+int(v)] == 0 {
						continue
					}
					from[v] = x
					if count[v] < caps[v] {
						end = v
						break
					}
					queue = append(queue, v)
				}
			}
			if end < 0 {
				continue
			}
			for v := end; v != u; v = from[v] {
				x := from[v]
				r := edge[int(x)*n+int(v)] - 1
				rows[r].Primary, rows[r].Secondary = rows[r].Secondary, rows[r].Primary
			}
			count[u]--
			count[end]++
			moved = true
			break // the edges changed: find them again
		}
		if !moved {
			return // no backend over its cap can give a row on
		}
	}
}

// BalanceStats is what a table's balance factor means for its rows.
type BalanceStats struct {
	// Factor is the balance factor, F.
	Factor float64 `json:"factor"`
	// Caps are each backend's cap on primary rows (Caps), in the table's
	// backend order; 0 for backends that are not good.
	Caps []int `json:"caps"`
	// AtCap counts the good backends primary for exactly their cap: those
	// the factor holds back (or that their share brought there).
	AtCap int `json:"backends_at_cap"`
	// OverCap counts good backends over their cap: 0 unless their rows
	// had nowhere to go (a table of few backends at F near 1).
	OverCap int `json:"backends_over_cap"`
}

// BalanceOf reports a table's balance: nil when it has no balance factor.
func BalanceOf(t *Table) *BalanceStats {
	caps := Caps(t.Backends, t.Balance)
	if caps == nil {
		return nil
	}
	st := &BalanceStats{Factor: float64(t.Balance) / BalanceScale, Caps: caps}
	count := make([]int, len(t.Backends))
	for _, r := range t.Rows {
		count[r.Primary]++
	}
	for i, b := range t.Backends {
		switch {
		case !b.Good():
		case count[i] == caps[i]:
			st.AtCap++
		case count[i] > caps[i]:
			st.OverCap++
		}
	}
	return st
}
