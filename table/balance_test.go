package table

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// moves compares two tables row by row by address: rows whose primary
// changed, and rows at risk (the old primary in neither new hop).
func moves(before, after *Table) (moved, risk int) {
	for r := range before.Rows {
		p := before.Backends[before.Rows[r].Primary].IP
		np, ns := after.Backends[after.Rows[r].Primary].IP, after.Backends[after.Rows[r].Secondary].IP
		if np != p {
			moved++
			if ns != p {
				risk++
			}
		}
	}
	return moved, risk
}

// atRiskRow reports whether row r's old primary is in neither new hop.
func atRiskRow(before, after *Table, r int) bool {
	p := before.Backends[before.Rows[r].Primary].IP
	return after.Backends[after.Rows[r].Primary].IP != p && after.Backends[after.Rows[r].Secondary].IP != p
}

// riskBeyond counts the rows a change puts at risk with balance (b0 to
// b1) that the same change does not without it (u0 to u1). GLB's own rule
// puts rows at risk where more than one backend is not good; balance may
// add none.
func riskBeyond(b0, b1, u0, u1 *Table) int {
	n := 0
	for r := range b0.Rows {
		if atRiskRow(b0, b1, r) && !atRiskRow(u0, u1, r) {
			n++
		}
	}
	return n
}

func primaryCounts(t *Table) []int {
	c := make([]int, len(t.Backends))
	for _, r := range t.Rows {
		c[r.Primary]++
	}
	return c
}

// checkBalanced checks bt, built with a balance factor, against ut, the
// same config built without: every row keeps its pair of hops, a row
// whose order differs has two good hops, and no good backend is over its
// cap. It returns the rows swapped.
func checkBalanced(t *testing.T, what string, ut, bt *Table) int {
	t.Helper()
	swapped := 0
	for r := range ut.Rows {
		u, b := ut.Rows[r], bt.Rows[r]
		if u == b {
			continue
		}
		if u.Primary != b.Secondary || u.Secondary != b.Primary {
			t.Fatalf("%s: row %d: hops %v, without balance %v: not the same pair", what, r, b, u)
		}
		if !ut.Backends[u.Primary].Good() || !ut.Backends[u.Secondary].Good() {
			t.Fatalf("%s: row %d swapped onto a backend that is not good", what, r)
		}
		swapped++
	}
	caps := Caps(bt.Backends, bt.Balance)
	for i, c := range primaryCounts(bt) {
		if bt.Backends[i].Good() && c > caps[i] {
			t.Errorf("%s: backend %s primary for %d rows, over its cap of %d", what, bt.Backends[i].IP, c, caps[i])
		}
	}
	return swapped
}

func mustBuild(t testing.TB, tc *TableConfig) *Table {
	t.Helper()
	tab, err := Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func without(tc *TableConfig, k int) *TableConfig {
	c := *tc
	c.Backends = slices.Delete(slices.Clone(tc.Backends), k, k+1)
	return &c
}

// TestBalanceProperties checks bounded load against its rules on random
// configs: weights, domains, states and health, and factors from 1.01 to
// 2: the caps hold, every row keeps its pair, a change of factor puts no
// row at risk, and a drain then the removal put none at risk that they do
// not put at risk without balance (none where GLB's invariant holds).
func TestBalanceProperties(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 3))
	for iter := range cases(32) {
		n := 2 + rng.IntN(64)
		tc := randomTable(rng, n, 3)
		if rng.IntN(2) == 0 {
			for i := range tc.Backends {
				tc.Backends[i].Weight = uint16(1 + rng.IntN(5))
			}
		}
		if rng.IntN(2) == 0 {
			for i := range tc.Backends {
				tc.Backends[i].Domain = fmt.Sprint("rack-", rng.IntN(4))
			}
		}
		f := uint16(1010 + rng.IntN(991))
		what := fmt.Sprintf("iter %d (%d backends, F %d)", iter, len(tc.Backends), f)
		ut := mustBuild(t, tc)
		bc := *tc
		bc.Balance = f
		bt := mustBuild(t, &bc)
		checkBalanced(t, what, ut, bt)
		if _, risk := moves(ut, bt); risk != 0 {
			t.Errorf("%s: turning balance on put %d rows at risk", what, risk)
		}
		other := bc
		other.Balance = uint16(1000 + rng.IntN(1001))
		if _, risk := moves(bt, mustBuild(t, &other)); risk != 0 {
			t.Errorf("%s: factor %d -> %d put %d rows at risk", what, f, other.Balance, risk)
		}
		// Drain a good backend, then remove it.
		k := slices.IndexFunc(bc.Backends, Backend.Good)
		if k < 0 {
			continue
		}
		drained := bc
		drained.Backends = slices.Clone(bc.Backends)
		drained.Backends[k].State = StateDraining
		if _, err := Build(&drained); err != nil {
			continue // the only good backend
		}
		dt := mustBuild(t, &drained)
		udrained := drained
		udrained.Balance = 0
		udt := mustBuild(t, &udrained)
		checkBalanced(t, what+" drained", udt, dt)
		if extra := riskBeyond(bt, dt, ut, udt); extra != 0 {
			t.Errorf("%s: draining %s put %d rows at risk that are not at risk without balance", what, bc.Backends[k].IP, extra)
		}
		rt := mustBuild(t, without(&drained, k))
		if extra := riskBeyond(dt, rt, udt, mustBuild(t, without(&udrained, k))); extra != 0 {
			t.Errorf("%s: removing drained %s put %d rows at risk that are not at risk without balance", what, bc.Backends[k].IP, extra)
		}
	}
}

// TestBalanceUnusedIsGLB: a factor that no backend's share comes near
// leaves the table exactly as without it.
func TestBalanceUnusedIsGLB(t *testing.T) {
	t.Parallel()
	tc := benchTable(4)
	ut := mustBuild(t, tc)
	bc := *tc
	bc.Balance = MaxBalance
	if bt := mustBuild(t, &bc); !slices.Equal(ut.Rows, bt.Rows) {
		t.Fatal("a factor of 2 on 4 equal backends changed rows")
	}
}

// TestBoundedLoadTradeOff measures bounded load at 256 equal backends
// beside Maglev, in the same run: balance (max/mean primary rows), and the
// rows moved for an add and for a drain then removal, as multiples of the
// minimum (the added backend's rows; the drained backend's), at F 1.01
// and at looser factors. Its log is the table in docs/tables.md.
func TestBoundedLoadTradeOff(t *testing.T) {
	t.Parallel()
	const n = 256
	tc := benchTable(n + 1)
	victim := rand.New(rand.NewPCG(9, 9)).IntN(n)
	addrs := func(bs []Backend) []netip.Addr {
		out := make([]netip.Addr, len(bs))
		for i, b := range bs {
			out[i] = b.IP
		}
		return out
	}
	base := *tc
	base.Backends = tc.Backends[:n]
	t.Logf("%d equal backends:", n)
	for _, f := range []uint16{0, 1010, 1020, 1050, 1100} {
		base.Balance = f
		bt := mustBuild(t, &base)
		if f != 0 {
			checkBalanced(t, "256", mustBuild(t, &TableConfig{Seed: base.Seed, Backends: base.Backends}), bt)
		}
		c := primaryCounts(bt)
		balance := float64(slices.Max(c)) * n / Rows

		plus := base
		plus.Backends = tc.Backends
		pt := mustBuild(t, &plus)
		addMoved, addRisk := moves(bt, pt)
		addMin := primaryCounts(pt)[n]

		drained := base
		drained.Backends = slices.Clone(base.Backends)
		drained.Backends[victim].State = StateDraining
		dt := mustBuild(t, &drained)
		drainMoved, drainRisk := moves(bt, dt)
		rt := mustBuild(t, without(&drained, victim))
		removeMoved, removeRisk := moves(dt, rt)
		dropMin := c[victim]

		name := "director, GLB's table"
		if f != 0 {
			name = fmt.Sprintf("director, F %.2f", float64(f)/BalanceScale)
		}
		t.Logf("  %-22s max/mean %.4f  add: moved %d = %.2f x min (%d), at risk %d;  drain then remove: moved %d+%d = %.2f x min (%d), at risk %d+%d",
			name, balance, addMoved, float64(addMoved)/float64(addMin), addMin, addRisk,
			drainMoved, removeMoved, float64(drainMoved+removeMoved)/float64(dropMin), dropMin, drainRisk, removeRisk)
		if addRisk > 0 {
			// What the ramp was for: with the earlier primaries in the
			// packets, the add strands nothing in one step.
			plus.History = DefaultHistory()
			if _, r := Advance(nil, bt, mustBuild(t, &plus), time.Unix(1_800_000_000, 0), nil); r.AtRisk != 0 {
				t.Errorf("F %d: with history, the add put %d rows at risk", f, r.AtRisk)
			}
			t.Logf("  %-22s with history in the packets: at risk 0", "")
		}
		if f != 0 && balance > float64(f)/BalanceScale {
			t.Errorf("F %d: max/mean %.4f over F", f, balance)
		}
		if drainRisk+removeRisk != 0 {
			t.Errorf("F %d: drain then remove put %d+%d rows at risk", f, drainRisk, removeRisk)
		}
		// Movement: the measured 1.76 and 1.78 at F 1.01 (docs/tables.md
		// says why not under 1.5), held under 2, and Maglev's 2.9.
		if add, drop := float64(addMoved)/float64(addMin), float64(drainMoved+removeMoved)/float64(dropMin); f != 0 && (add > 2 || drop > 2) {
			t.Errorf("F %d: an add moved %.2f x the minimum, a drain then removal %.2f x", f, add, drop)
		}
		if f == 0 && (addMoved != addMin || drainMoved+removeMoved != dropMin) {
			t.Errorf("GLB's table moved more than the minimum: %d for %d, %d for %d", addMoved, addMin, drainMoved+removeMoved, dropMin)
		}
	}

	// Maglev on the same addresses.
	mBefore := maglev(addrs(base.Backends), 65537)
	mPlus := maglev(addrs(tc.Backends), 65537)
	mLess := maglev(addrs(without(&base, victim).Backends), 65537)
	mAdd, mAddMin, mDrop, mDropMin := 0, 0, 0, 0
	for r := range mBefore {
		if mPlus[r] == n {
			mAddMin++
		}
		if mPlus[r] != mBefore[r] {
			mAdd++
		}
		if mBefore[r] == victim {
			mDropMin++
		}
		old := mBefore[r]
		if old > victim {
			old--
		}
		if mBefore[r] == victim || mLess[r] != old {
			mDrop++
		}
	}
	t.Logf("  %-22s max/mean %.4f  add: moved %d = %.2f x min (%d);  remove: moved %d = %.2f x min (%d)",
		"Maglev, M = 65,537", maxOverMean(mBefore, n), mAdd, float64(mAdd)/float64(mAddMin), mAddMin, mDrop, float64(mDrop)/float64(mDropMin), mDropMin)
}

// TestBalanceAddsWithHistory: adding backends to a table with a balance
// factor puts at risk, by GLB's two hops, rows whose swapped-in primary
// the new backend displaces; with the earlier primaries in the packets,
// one at a time or two at once, none is.
func TestBalanceAddsWithHistory(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 5))
	risky := 0
	now := time.Unix(1_800_000_000, 0)
	for iter := range cases(24) {
		tc := benchTable(8 + rng.IntN(120))
		tc.Balance = uint16(1005 + rng.IntN(100))
		tc.History = DefaultHistory()
		add := 1 + rng.IntN(2)
		live := *tc
		live.Backends = tc.Backends[:len(tc.Backends)-add]
		lt, nt := mustBuild(t, &live), mustBuild(t, tc)
		if _, direct := moves(lt, nt); direct > 0 {
			risky++
		}
		if _, r := Advance(nil, lt, nt, now, nil); r.AtRisk != 0 {
			t.Errorf("iter %d: adding %d with history put %d rows at risk", iter, add, r.AtRisk)
		}
	}
	if risky == 0 {
		t.Error("no add put rows at risk by GLB's rule: the test tests nothing")
	}
	t.Logf("%d of the adds put rows at risk by GLB's rule, none with history", risky)
}

// TestClosenessOrders: the closeness code never decreases as the margin
// grows, and tells apart margins a thirty-second apart.
func TestClosenessOrders(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		a, b := rng.Uint64()>>rng.IntN(64), rng.Uint64()>>rng.IntN(64)
		if a > b {
			a, b = b, a
		}
		if closeness(a) > closeness(b) {
			t.Fatalf("closeness(%d) = %d > closeness(%d) = %d", a, closeness(a), b, closeness(b))
		}
		if a >= 64 && b >= a+a/16 && closeness(a) == closeness(b) {
			t.Fatalf("%d and %d share code %d", a, b, closeness(a))
		}
	}
	if closeness(^uint64(0)) >= 1<<12 {
		t.Fatal("a code past 12 bits")
	}
}
