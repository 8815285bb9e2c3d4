package table

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// zoneTable spreads tc's backends over n domains at random.
func zoneTable(rng *rand.Rand, tc *TableConfig, n int) {
	for i := range tc.Backends {
		tc.Backends[i].Domain = fmt.Sprintf("rack-%c", 'a'+rng.IntN(n))
	}
}

// refDomainRow is the documented rule (domains.go) over a full ranking.
func refDomainRow(R []int, bs []Backend) Row {
	if len(R) == 1 {
		return Row{uint32(R[0]), uint32(R[0])}
	}
	d := -1
	for _, i := range R[1:] {
		if bs[i].Domain != bs[R[0]].Domain {
			d = i
			break
		}
	}
	if d < 0 {
		return ruleRow(R, bs)
	}
	Rp := []int{R[0], d}
	for _, i := range R[1:] {
		if i != d {
			Rp = append(Rp, i)
		}
	}
	if bs[R[0]].Good() && bs[R[0]].State == StateFilling {
		return Row{uint32(R[0]), uint32(R[1])}
	}
	return ruleRow(Rp, bs)
}

// TestDomainBuildMatchesReference: with domains (and weights), the build,
// portable and vector, follows the documented rule over the reference
// ranking.
func TestDomainBuildMatchesReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(31, 32))
	for i := 0; i < cases(40); i++ {
		tc := randomTable(rng, 2+rng.IntN(40), rng.IntN(8))
		zoneTable(rng, tc, 2+rng.IntN(3))
		if i%2 == 1 {
			weighTable(rng, tc, 30)
		}
		matchesReference(t, fmt.Sprintf("table %d", i), tc, haveVectorScores, refDomainRow)
	}
}

// TestDomainsKeepHopsApart: with every backend good, no row has both hops
// in one domain; the report says so and gives each domain its share.
func TestDomainsKeepHopsApart(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(33, 34))
	for i := 0; i < 20; i++ {
		tc := randomTable(rng, 2+rng.IntN(60), 0)
		zoneTable(rng, tc, 2+rng.IntN(4))
		tab, err := Build(tc)
		if err != nil {
			t.Fatal(err)
		}
		st := Domains(tab)
		if st == nil {
			continue // every backend fell in one domain
		}
		for r, row := range tab.Rows {
			if tab.Backends[row.Primary].Domain == tab.Backends[row.Secondary].Domain {
				t.Fatalf("table %d row %#x: both hops in %s", i, r, tab.Backends[row.Primary].Domain)
			}
		}
		total := 0
		for _, d := range st.Domains {
			total += d.PrimaryRows
			if d.Orphaned != 0 {
				t.Errorf("table %d: domain %s would orphan %d rows", i, d.Name, d.Orphaned)
			}
		}
		if st.SameDomain != 0 || st.Conflicts != 0 || total != Rows {
			t.Errorf("table %d: %+v", i, st)
		}
	}
}

// TestDomainChangesKeepConnections: with domains, the changes GLB's rule
// makes safe stay safe: draining a backend, removing it once drained, a
// backend going down and coming back, adding one as filling, and making
// it active.
func TestDomainChangesKeepConnections(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(35, 36))
	atRisk := func(a, b *TableConfig) int {
		ta, err := Build(a)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := Build(b)
		if err != nil {
			t.Fatal(err)
		}
		r := Compare([]*Table{ta}, []*Table{tb}).Tables[0].Rows
		return r.AtRisk
	}
	with := func(tc *TableConfig, f func(bs []Backend) []Backend) *TableConfig {
		n := *tc
		n.Backends = f(slices.Clone(tc.Backends))
		return &n
	}
	for i := 0; i < cases(15); i++ {
		tc := randomTable(rng, 3+rng.IntN(40), 0)
		zoneTable(rng, tc, 2+rng.IntN(3))
		if i%2 == 1 {
			weighTable(rng, tc, 10)
		}
		k := rng.IntN(len(tc.Backends))
		drained := with(tc, func(bs []Backend) []Backend { bs[k].State = StateDraining; return bs })
		removed := with(tc, func(bs []Backend) []Backend { return slices.Delete(bs, k, k+1) })
		down := with(tc, func(bs []Backend) []Backend { bs[k].Healthy = false; return bs })
		added := Backend{IP: randomV4(rng), State: StateFilling, Healthy: true, Domain: tc.Backends[rng.IntN(len(tc.Backends))].Domain}
		filling := with(tc, func(bs []Backend) []Backend { return append(bs, added) })
		active := with(filling, func(bs []Backend) []Backend { bs[len(bs)-1].State = StateActive; return bs })
		for _, step := range []struct {
			name     string
			from, to *TableConfig
		}{
			{"drain", tc, drained}, {"remove the drained", drained, removed},
			{"down", tc, down}, {"back up", down, tc},
			{"add as filling", tc, filling}, {"filling to active", filling, active},
		} {
			if n := atRisk(step.from, step.to); n != 0 {
				t.Errorf("table %d, backend %d, %s: %d rows at risk", i, k, step.name, n)
			}
		}
	}
}
