package table

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// historyTable is n active backends 10.1.0.1... at weight 1000, with
// history settings set.
func historyTable(n int, set HistorySettings) *TableConfig {
	tc := &TableConfig{Name: "h", History: set}
	copy(tc.Seed[:], "history test seed")
	for i := range n {
		tc.Backends = append(tc.Backends, Backend{IP: netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}), State: StateActive, Healthy: true, Weight: 1000})
	}
	return tc
}

// TestHistoryTwoSafeEdits is the sequence that broke connections with two
// hops: a weight raised, then a backend added 3 s later, each safe alone.
// With the earlier primaries in the packets neither puts a row at risk;
// with GLB's two hops the second does, and the rule that judged one change
// against what is live (compareRows) said it did not.
func TestHistoryTwoSafeEdits(t *testing.T) {
	t.Parallel()
	for _, noHops := range []bool{false, true} {
		t.Run(fmt.Sprintf("no_hops=%v", noHops), func(t *testing.T) {
			set := HistorySettings{Window: DefaultHistoryWindow, NoHops: noHops}
			tc := historyTable(4, set)
			t0 := buildCfg(t, tc)
			tc.Backends[1].Weight = 3000
			t1 := buildCfg(t, tc)
			tc.Backends = append(tc.Backends, Backend{IP: netip.MustParseAddr("10.1.0.5"), State: StateActive, Healthy: true, Weight: 3000})
			t2 := buildCfg(t, tc)
			start := time.Unix(1_800_000_000, 0)
			h1, r1 := Advance(nil, t0, t1, start, nil)
			if r1.AtRisk != 0 {
				t.Fatalf("raising a weight: %d rows at risk", r1.AtRisk)
			}
			h2, r2 := Advance(h1, t1, t2, start.Add(3*time.Second), nil)
			if _, risk := moves(t1, t2); risk != 0 {
				t.Fatalf("one change against what is live: %d at risk, want 0 (the rule that missed it)", risk)
			}
			if noHops {
				if r2.AtRisk == 0 {
					t.Fatal("with two hops, the add strands the first edit's old primaries, and the verdict said 0")
				}
				return
			}
			if r2.AtRisk != 0 {
				t.Fatalf("with history in the packets: %d rows at risk", r2.AtRisk)
			}
			rows, hopRows, until := h2.Summary()
			if rows == 0 || hopRows == 0 || !until.Equal(start.Add(3*time.Second+DefaultHistoryWindow).UTC()) {
				t.Fatalf("history: %d rows, %d with hops, until %v", rows, hopRows, until)
			}
			// Every row whose primary changed twice lists its first primary.
			for r := range t2.Rows {
				p0 := t0.Backends[t0.Rows[r].Primary].IP
				if p0 == t2.Backends[t2.Rows[r].Primary].IP || p0 == t2.Backends[t2.Rows[r].Secondary].IP {
					continue
				}
				if !slices.Contains(h2.RowHops(r), p0) {
					t.Fatalf("row %d: first primary %s not in hops %v", r, p0, h2.RowHops(r))
				}
			}
		})
	}
}

// TestHistoryExpires: once the window has passed, entries go, and a
// history with none left is nil.
func TestHistoryExpires(t *testing.T) {
	t.Parallel()
	tc := historyTable(4, HistorySettings{Window: time.Minute})
	t0 := buildCfg(t, tc)
	tc.Backends[0].State = StateDraining
	t1 := buildCfg(t, tc)
	now := time.Unix(1_800_000_000, 0)
	h, _ := Advance(nil, t0, t1, now, nil)
	if h.Empty() {
		t.Fatal("a drain with the drained backend as secondary remembers it")
	}
	if h2, _ := Advance(h, t1, t1, now.Add(59*time.Second), nil); !h2.Equal(h) {
		t.Fatal("within the window, nothing changes")
	}
	if h3, _ := Advance(h, t1, t1, now.Add(time.Minute), nil); !h3.Empty() {
		t.Fatal("at the window's end, the history is gone")
	}
}

// TestHistoryWindowZero is GLB's verdict: the old primary counts at the
// change, nothing is remembered after it.
func TestHistoryWindowZero(t *testing.T) {
	t.Parallel()
	tc := historyTable(4, HistorySettings{})
	t0 := buildCfg(t, tc)
	tc.Backends = tc.Backends[1:] // removed without a drain
	t1 := buildCfg(t, tc)
	h, r := Advance(nil, t0, t1, time.Unix(1_800_000_000, 0), nil)
	if _, glb := moves(t0, t1); !h.Empty() || r.AtRisk != glb || r.AtRisk == 0 {
		t.Fatalf("window 0: history %v, %d at risk, GLB's rule %d", h.Empty(), r.AtRisk, glb)
	}
}

// TestHistoryRandomChanges holds Advance to the definition over seeded
// random sequences of changes of every kind (drains, undrains, adds
// active or filling, activations, removals, weights up and down, health
// flips, the hash key, restarts), with the clock moving on between them:
// after each, a row's window primaries are the backends that were its
// primary at some moment of the last window (its primary before the change
// included), less those the verdict wrote off when it counted them (and
// those that went down); every one of them that is up must be in the
// row's new chain, and the rows where one is not must be exactly the
// verdict's count. The hops must be up, distinct, neither the primary
// nor the secondary, newest first, and window primaries.
func TestHistoryRandomChanges(t *testing.T) {
	t.Parallel()
	for _, noHops := range []bool{false, true} {
		for seed := range uint64(cases(3)) {
			t.Run(fmt.Sprintf("no_hops=%v/seed=%d", noHops, seed), func(t *testing.T) {
				t.Parallel()
				randomHistory(t, seed, HistorySettings{Window: time.Minute, NoHops: noHops}, 1000)
			})
		}
	}
}

// pool is the addresses the random changes take backends from: a
// removed backend may come back.
const pool = 16

func poolIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}) }

func poolIndex(ip netip.Addr) int { return int(ip.As4()[3]) - 1 }

// poolIndexes is poolIndex of each of t's backends, in t's order.
func poolIndexes(t *Table) []int {
	out := make([]int, len(t.Backends))
	for j, b := range t.Backends {
		out[j] = poolIndex(b.IP)
	}
	return out
}

// rowEras is what the definition knows of a row: for each backend of the
// pool, when it last stopped being the row's primary (0: never, or it is
// the primary now), and whether it was written off since.
type rowEras struct {
	ended [pool]int64
	lost  uint32
}

func randomHistory(t *testing.T, seed uint64, set HistorySettings, steps int) {
	rng := rand.New(rand.NewPCG(seed, 45))
	tc := historyTable(6, set)
	b, err := NewBuilder(tc)
	if err != nil {
		t.Fatal(err)
	}
	live := b.Table()
	now := time.Unix(1_800_000_000, 0)
	var hist *History
	ghostUp := map[netip.Addr]bool{} // removed backends: the checks' word
	eras := make([]rowEras, Rows)
	win := int64(set.Window)
	at, checked := 0, 0
	for step := range steps {
		now = now.Add(time.Duration(1+rng.IntN(20)) * time.Second)
		ns := now.UnixNano()
		next := *tc
		next.Backends = slices.Clone(tc.Backends)
		what := mutateHistory(rng, &next, ghostUp)
		if checkBuildable(next.Backends) != nil {
			continue
		}
		if _, err := b.Update(&next); err != nil {
			t.Fatal(err)
		}
		nt := b.Table()
		up := func(ip netip.Addr) (bool, bool) { u, ok := ghostUp[ip]; return u, ok }
		h, risk := Advance(hist, live, nt, now, up)
		var upNow [pool]bool
		for i := range pool {
			u, ok := ghostUp[poolIP(i)]
			upNow[i] = !ok || u
		}
		for _, b := range nt.Backends {
			upNow[poolIndex(b.IP)] = b.Healthy
		}
		// A backend is in a row's window when it stopped being the row's
		// primary after cutoff and was not written off since.
		cutoff := ns - win
		inWindow := func(e *rowEras, i int) bool { return e.ended[i] > cutoff && e.lost&(1<<i) == 0 }
		// Each backend's place in the pool, by its index in each table.
		livePool, newPool := poolIndexes(live), poolIndexes(nt)
		var inTable [pool]bool
		for _, i := range newPool {
			inTable[i] = true
		}
		hashChanged := live.HashKey != nt.HashKey
		// With a new hash key, a flow's new row is any row: every row's
		// window primaries are every row's.
		var merged rowEras
		if hashChanged {
			for r := range eras {
				for i := range pool {
					if inWindow(&eras[r], i) {
						merged.ended[i] = max(merged.ended[i], eras[r].ended[i])
					}
				}
				merged.ended[poolIndex(live.Backends[live.Rows[r].Primary].IP)] = ns
			}
		}
		atRisk := 0
		for r := range nt.Rows {
			p0 := livePool[live.Rows[r].Primary]
			np, ns2 := newPool[nt.Rows[r].Primary], newPool[nt.Rows[r].Secondary]
			e := &eras[r] // updated in place
			if hashChanged {
				*e = merged
			} else if p0 != np {
				e.ended[p0], e.lost = ns, e.lost&^(1<<p0)
			}
			e.ended[np] = 0 // the primary now: not an earlier one
			var chain [pool]bool
			chain[np], chain[ns2] = true, true
			hops := h.RowHops(r)
			// Newest first, the table's own backends before removed ones.
			prev, prevGroup := int64(1<<62), 0
			for _, ip := range hops {
				i := poolIndex(ip)
				group := 1
				if inTable[i] {
					group = 0
				}
				if group != prevGroup {
					prev = 1 << 62
				}
				if !upNow[i] || i == np || i == ns2 || chain[i] || !inWindow(e, i) || group < prevGroup || e.ended[i] > prev {
					t.Fatalf("step %d (%s), row %d: hops %v, primary %d, secondary %d, eras %+v", step, what, r, hops, np, ns2, e)
				}
				chain[i], prev, prevGroup = true, e.ended[i], group
			}
			if set.NoHops && len(hops) > 0 {
				t.Fatalf("step %d: history_hops off, row %d lists %v", step, r, hops)
			}
			missing := p0 != np && upNow[p0] && !chain[p0] // the old primary, whatever the window
			for i := range pool {
				if inWindow(e, i) {
					if upNow[i] && !chain[i] {
						missing = true
					}
					if !upNow[i] || !chain[i] {
						e.lost |= 1 << i // written off: stranded or down
					}
				}
			}
			if missing {
				atRisk++
				if !set.NoHops && win > 0 && len(hops) < HistoryHops {
					t.Fatalf("step %d (%s), row %d: a window primary is left out with room in the hops %v", step, what, r, hops)
				}
			}
			if win == 0 {
				*e = rowEras{}
			}
		}
		if atRisk != risk.AtRisk {
			t.Fatalf("step %d (%s): %d rows have a window primary that is up and not in their chain; the verdict counts %d",
				step, what, atRisk, risk.AtRisk)
		}
		checked++
		// A restart: the history adopted as it is, with nothing changed,
		// gives the same history and strands nothing.
		if rng.IntN(10) == 0 {
			again, r2 := Advance(h, nt, nt, now, up)
			if r2.AtRisk != 0 || !again.Equal(h) {
				t.Fatalf("step %d: adopting the live history again changed it (%d at risk)", step, r2.AtRisk)
			}
		}
		at += risk.AtRisk
		hist, live, tc = h, nt, &next
	}
	if checked < steps/2 {
		t.Fatalf("only %d of %d changes could be built", checked, steps)
	}
	t.Logf("%d changes judged, %d rows at risk in all", checked, at)
}

// mutateHistory makes one random change to tc, of the kinds an operator
// or the checks make, and says what it was.
func mutateHistory(rng *rand.Rand, tc *TableConfig, ghostUp map[netip.Addr]bool) string {
	bs := tc.Backends
	i := rng.IntN(len(bs))
	switch k := rng.IntN(11); {
	case k == 0 && len(bs) < 10:
		for {
			ip := poolIP(rng.IntN(pool))
			if !slices.ContainsFunc(bs, func(b Backend) bool { return b.IP == ip }) {
				st := StateActive
				if rng.IntN(2) == 0 {
					st = StateFilling
				}
				tc.Backends = append(bs, Backend{IP: ip, State: st, Healthy: true, Weight: uint16(500 + rng.IntN(2000))})
				delete(ghostUp, ip)
				return "add " + ip.String()
			}
		}
	case k == 1 && len(bs) > 3:
		ip := bs[i].IP
		ghostUp[ip] = true
		tc.Backends = slices.Delete(bs, i, i+1)
		return "remove " + ip.String()
	case k == 2:
		bs[i].State = StateDraining
		return "drain"
	case k == 3:
		bs[i].State = StateActive
		return "undrain or activate"
	case k == 4:
		bs[i].Healthy = !bs[i].Healthy
		return "health flip"
	case k == 5 || k == 6:
		w := float64(bs[i].W()) * (0.6 + 0.8*rng.Float64())
		bs[i].Weight = uint16(max(1, min(65535, int(w))))
		return "weight"
	case k == 7 && rng.IntN(20) == 0:
		tc.HashKey[rng.IntN(16)]++
		return "hash key"
	case k == 8:
		for ip := range ghostUp {
			ghostUp[ip] = !ghostUp[ip]
			return "removed backend's health flip"
		}
	case k == 9 && rng.IntN(3) == 0:
		tc.Seed[rng.IntN(16)]++
		return "seed"
	}
	return "nothing"
}
