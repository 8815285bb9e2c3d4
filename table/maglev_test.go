package table

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/dchest/siphash"
)

// maglev builds Maglev's lookup table (Eisenbud et al., NSDI 2016, as
// Katran and Cilium use it) of size m for the backends, and returns its
// first Rows entries as primaries: the comparison for balance and
// movement in docs/tables.md.
func maglev(bs []netip.Addr, m int) []int {
	n := len(bs)
	offset, skip, next := make([]uint64, n), make([]uint64, n), make([]uint64, n)
	for i, b := range bs {
		a := AddrBytes(b)
		offset[i] = siphash.Hash(1, 2, a) % uint64(m)
		skip[i] = siphash.Hash(3, 4, a)%uint64(m-1) + 1
	}
	entry := make([]int, m)
	for i := range entry {
		entry[i] = -1
	}
	for filled := 0; ; {
		for i := 0; i < n; i++ {
			c := (offset[i] + next[i]*skip[i]) % uint64(m)
			for entry[c] >= 0 {
				next[i]++
				c = (offset[i] + next[i]*skip[i]) % uint64(m)
			}
			entry[c] = i
			next[i]++
			if filled++; filled == m {
				return entry[:Rows]
			}
		}
	}
}

// maxOverMean is the most primary rows any backend has over the mean.
func maxOverMean(primaries []int, n int) float64 {
	count := make([]int, n)
	for _, p := range primaries {
		count[p]++
	}
	top := 0
	for _, c := range count {
		top = max(top, c)
	}
	return float64(top) * float64(n) / float64(len(primaries))
}

// TestBalanceAndMovementAgainstMaglev measures, on one set of backends,
// GLB's rendezvous table (director's) and Maglev's: the balance of primary
// rows (max/mean) and the rows whose primary moves when one backend is
// removed, as a multiple of the minimum (the removed backend's rows). It
// asserts what each design promises: rendezvous moves the minimum exactly;
// Maglev balances within 1%.
func TestBalanceAndMovementAgainstMaglev(t *testing.T) {
	t.Parallel()
	const n = 256
	tc := benchTable(n)
	addrs := make([]netip.Addr, n)
	for i, b := range tc.Backends {
		addrs[i] = b.IP
	}
	rng := rand.New(rand.NewPCG(9, 9))
	victim := rng.IntN(n)
	rest := append(append([]netip.Addr(nil), addrs[:victim]...), addrs[victim+1:]...)
	index := func(i int) int { // position in rest of addrs[i]
		if i > victim {
			return i - 1
		}
		return i
	}
	moved := func(before, after []int) (moves, minimum int) {
		for r := range before {
			if before[r] == victim {
				minimum++
				continue // must move
			}
			if after[r] != index(before[r]) {
				moves++
			}
		}
		return moves + minimum, minimum
	}

	tab, err := Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	less := *tc
	less.Backends = append(append([]Backend(nil), tc.Backends[:victim]...), tc.Backends[victim+1:]...)
	tab2, err := Build(&less)
	if err != nil {
		t.Fatal(err)
	}
	dBefore, dAfter := make([]int, Rows), make([]int, Rows)
	for r := range tab.Rows {
		dBefore[r], dAfter[r] = int(tab.Rows[r].Primary), int(tab2.Rows[r].Primary)
	}
	dMoves, dMin := moved(dBefore, dAfter)
	dBalance := maxOverMean(dBefore, n)

	mBefore, mAfter := maglev(addrs, 65537), maglev(rest, 65537)
	mMoves, mMin := moved(mBefore, mAfter)
	mBalance := maxOverMean(mBefore, n)

	t.Logf("%d equal backends, one removed:", n)
	t.Logf("  %-28s max/mean %.3f  moved %5d rows = %.2f x the minimum (%d)", "director (GLB's rendezvous)", dBalance, dMoves, float64(dMoves)/float64(dMin), dMin)
	t.Logf("  %-28s max/mean %.3f  moved %5d rows = %.2f x the minimum (%d)", "Maglev, M = 65,537", mBalance, mMoves, float64(mMoves)/float64(mMin), mMin)
	if dMoves != dMin {
		t.Errorf("rendezvous moved %d rows for a minimum of %d", dMoves, dMin)
	}
	if mBalance > 1.01 {
		t.Errorf("Maglev's max/mean %.3f: the comparison is not Maglev", mBalance)
	}

	// Weights 1 to 4 in turn: the most primary rows any backend has over
	// its weighted fair share.
	wc := benchTable(n)
	sum := 0
	for i := range wc.Backends {
		wc.Backends[i].Weight = uint16(1 + i%4)
		sum += 1 + i%4
	}
	wt, err := Build(wc)
	if err != nil {
		t.Fatal(err)
	}
	count := make([]int, n)
	for _, r := range wt.Rows {
		count[r.Primary]++
	}
	worst := 0.0
	for i, c := range count {
		worst = max(worst, float64(c)/(float64(Rows)*float64(wc.Backends[i].W())/float64(sum)))
	}
	t.Logf("  %-28s max/fair share %.3f", "director, weights 1-4", worst)
	if worst > 1.5 {
		t.Errorf("weighted max over fair share %.3f", worst)
	}
}
