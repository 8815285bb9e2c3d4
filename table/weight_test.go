package table

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestExpScoreIsMinusLog2: E(h) is -log2(1 - h/2^64) within the table's
// interpolation error, 0 at h = 0, and never decreases as h grows.
func TestExpScoreIsMinusLog2(t *testing.T) {
	t.Parallel()
	if expScore(0) != 0 {
		t.Fatalf("E(0) = %d", expScore(0))
	}
	for i, v := range log2Table {
		want := math.Log2(1+float64(i)/(1<<logTableBits)) * (1 << logFracBits)
		if math.Abs(float64(v)-want) > 1<<8 {
			t.Fatalf("log2Table[%d] = %d, want %.0f", i, v, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		h := rng.Uint64() >> rng.IntN(64)
		want := -math.Log2(float64(-h)/(1<<64)) * (1 << logFracBits)
		if h == 0 {
			want = 0
		}
		if got := float64(expScore(h)); math.Abs(got-want) > want*1e-7+(1<<24) {
			t.Fatalf("E(%#x) = %.0f, want %.0f", h, got, want)
		}
		g := h + rng.Uint64N(1<<40)
		if g < h {
			continue
		}
		if expScore(g) < expScore(h) {
			t.Fatalf("E(%#x) = %d < E(%#x) = %d", g, expScore(g), h, expScore(h))
		}
	}
	if e := expScore(^uint64(0)); e > 64<<logFracBits || e<<keyShift>>keyShift != e {
		t.Fatalf("E(max) = %d overflows the key", e)
	}
}

// TestScoreBoundKeepsEveryQualifier: a score over the bound never has a
// key at or under the bound's key, at any weight up to wmax.
func TestScoreBoundKeepsEveryQualifier(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100000; i++ {
		w := uint16(1 + rng.IntN(MaxWeight))
		wmax := w + uint16(rng.IntN(MaxWeight-int(w)+1))
		h := rng.Uint64() >> rng.IntN(64)
		k := weightedKey(h, w)
		if b := scoreBound(k, wmax); h > b {
			t.Fatalf("h %#x at weight %d (key %d) is over the bound %#x for wmax %d", h, w, k, b, wmax)
		}
	}
}

// refWeightedRanking orders the non-inactive backends of a row by their
// weighted keys, computed from the reference SipHash, ties by address.
func refWeightedRanking(seed Key, row uint32, bs []Backend) []int {
	var idx []int
	for i, b := range bs {
		if b.State != StateInactive {
			idx = append(idx, i)
		}
	}
	key := func(i int) uint64 { return weightedKey(refScore(seed, row, bs[i].IP), bs[i].W()) }
	slices.SortFunc(idx, func(a, b int) int {
		if ka, kb := key(a), key(b); ka != kb {
			if ka < kb {
				return -1
			}
			return 1
		}
		return bs[a].IP.Compare(bs[b].IP)
	})
	return idx
}

// weighTable gives tc's backends random weights from 1 to maxW.
func weighTable(rng *rand.Rand, tc *TableConfig, maxW int) {
	for i := range tc.Backends {
		tc.Backends[i].Weight = uint16(1 + rng.IntN(maxW))
	}
	tc.Backends[0].Weight = uint16(maxW) // at least two weights, mostly
	if len(tc.Backends) > 1 {
		tc.Backends[1].Weight = 1
	}
}

// TestWeightedBuildMatchesReference: the weighted build, portable and
// vector, follows the documented rule over the reference ranking.
func TestWeightedBuildMatchesReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < cases(40); i++ {
		tc := randomTable(rng, 2+rng.IntN(40), rng.IntN(6))
		weighTable(rng, tc, []int{2, 10, MaxWeight}[i%3])
		matchesReference(t, fmt.Sprintf("table %d", i), tc, haveVectorScores, ruleRow)
	}
}

// matchesReference builds tc with the portable scorer and, where the CPU
// has it (vector), the vector one, and checks the sample rows against
// rule over the reference weighted ranking.
func matchesReference(t *testing.T, what string, tc *TableConfig, vector bool, rule func([]int, []Backend) Row) {
	t.Helper()
	for _, v := range []bool{false, vector} {
		tab, err := buildWith(tc, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range sampleRows {
			R := refWeightedRanking(tc.Seed, r, tc.Backends)
			if got, want := tab.Rows[r], rule(R, tc.Backends); got != want {
				t.Fatalf("%s (vector %v) row %#x: got %v, reference %v (%v)", what, v, r, got, want, tc.Backends)
			}
		}
	}
}

// ruleRow is the hops rule (refRow's) over a given ranking.
func ruleRow(R []int, bs []Backend) Row {
	if len(R) == 1 {
		return Row{uint32(R[0]), uint32(R[0])}
	}
	for _, i := range R {
		if bs[i].Good() {
			if i == R[0] {
				return Row{uint32(i), uint32(R[1])}
			}
			return Row{uint32(i), uint32(R[0])}
		}
	}
	return Row{uint32(R[0]), uint32(R[1])}
}

// TestEqualWeightsAreGLB: one weight for every backend, whatever its
// value, and one failure domain for all, build GLB's table byte for byte:
// on the GLB compatibility config through GLB's binary, and on every
// config of testdata.
func TestEqualWeightsAreGLB(t *testing.T) {
	t.Parallel()
	plain, err := parseConfig([]byte(glbCompatConfig))
	if err != nil {
		t.Fatal(err)
	}
	want := glbBytes(t, plain)
	for _, w := range []string{"1", "7", "65535"} {
		src := strings.ReplaceAll(glbCompatConfig, `"healthy": true}`, `"healthy": true, "weight": `+w+`, "domain": "rack-a"}`)
		src = strings.ReplaceAll(src, `"healthy": false}`, `"healthy": false, "weight": `+w+`, "domain": "rack-a"}`)
		c, err := parseConfig([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if c.Tables[0].Backends[0].Weight == 0 || c.Tables[0].Backends[0].Domain != "rack-a" {
			t.Fatal("the weights and domains were not written into the config")
		}
		if got := glbBytes(t, c); !bytes.Equal(got, want) {
			t.Errorf("weight %s everywhere: GLB binary differs at byte %d", w, firstDiff(got, want))
		}
	}
	files, _ := filepath.Glob("../testdata/configs/*.json")
	if len(files) == 0 {
		t.Fatal("no configs in testdata/configs")
	}
	balancedTables := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := parseConfig(data)
		if err != nil {
			continue // the configs the table tools refuse have their own tests
		}
		if slices.ContainsFunc(c.Tables, func(tc TableConfig) bool {
			return tc.Balance != 0 || slices.ContainsFunc(tc.Backends, func(b Backend) bool { return b.Weight != 0 || b.Domain != "" })
		}) {
			continue // weights or domains of its own: their own tests
		}
		base, err := BuildAll(c)
		if err != nil {
			continue
		}
		for i := range c.Tables {
			for j := range c.Tables[i].Backends {
				c.Tables[i].Backends[j].Weight = 300
				c.Tables[i].Backends[j].Domain = "rack-a"
			}
		}
		weighted, err := BuildAll(c)
		if err != nil {
			t.Fatal(err)
		}
		for i := range base {
			if !slices.Equal(base[i].Rows, weighted[i].Rows) {
				t.Errorf("%s table %d: weight 300 and one domain everywhere changed the rows", f, i)
			}
		}
		// A balance factor no backend's share reaches: the rows stay.
		for i := range c.Tables {
			caps := Caps(base[i].Backends, MaxBalance)
			if caps == nil || slices.ContainsFunc(base[i].Backends, func(b Backend) bool { return !b.Good() }) {
				continue
			}
			over := false
			for k, n := range primaryShares(base[i]) {
				over = over || n > caps[k]
			}
			if over {
				continue
			}
			c.Tables[i].Balance = MaxBalance
			balanced, err := Build(&c.Tables[i])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(base[i].Rows, balanced.Rows) {
				t.Errorf("%s table %d: a balance factor of 2 that no backend reaches changed the rows", f, i)
			}
			balancedTables++
		}
	}
	if balancedTables == 0 {
		t.Error("no fixture table was built with a balance factor")
	}
}

func glbBytes(t *testing.T, c *Config) []byte {
	t.Helper()
	tabs, err := BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteGLB(&buf, tabs); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// primaryShares counts each backend's primary rows.
func primaryShares(tab *Table) []int {
	n := make([]int, len(tab.Backends))
	for _, r := range tab.Rows {
		n[r.Primary]++
	}
	return n
}

// TestWeightedShares: a backend's share of primary rows follows its weight,
// within four standard deviations of the binomial count.
func TestWeightedShares(t *testing.T) {
	t.Parallel()
	for _, weights := range [][]uint16{
		{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		{1, 1, 1, 1, 1, 1, 1, 100},
		{65535, 1000, 1000, 1000, 1000, 3},
	} {
		tc := benchTable(len(weights))
		sum := 0.0
		for i, w := range weights {
			tc.Backends[i].Weight = w
			sum += float64(w)
		}
		tab, err := Build(tc)
		if err != nil {
			t.Fatal(err)
		}
		for i, got := range primaryShares(tab) {
			p := float64(weights[i]) / sum
			want := p * Rows
			if sd := math.Sqrt(Rows * p * (1 - p)); math.Abs(float64(got)-want) > 4*sd+1 {
				t.Errorf("weights %v: backend %d (weight %d) has %d primary rows, want %.0f ± %.0f", weights, i, weights[i], got, want, 4*sd)
			}
		}
	}
}

// TestRaisingAWeightMovesRowsOnlyToIt: raising one backend's weight moves
// rows only onto it, each moved row keeping its old primary as secondary,
// so no row is at risk; a row whose primary stays can only get it as its
// secondary.
func TestRaisingAWeightMovesRowsOnlyToIt(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < cases(20); i++ {
		tc := randomTable(rng, 2+rng.IntN(60), 0)
		if i%2 == 1 {
			weighTable(rng, tc, 20)
		}
		before, err := Build(tc)
		if err != nil {
			t.Fatal(err)
		}
		k := rng.IntN(len(tc.Backends))
		if tc.Backends[k].State == StateInactive {
			continue
		}
		up := *tc
		up.Backends = slices.Clone(tc.Backends)
		up.Backends[k].Weight = tc.Backends[k].W() + uint16(1+rng.IntN(50))
		after, err := Build(&up)
		if err != nil {
			t.Fatal(err)
		}
		moved := 0
		for r := range after.Rows {
			b, a := before.Rows[r], after.Rows[r]
			if b == a {
				continue
			}
			if a.Primary == b.Primary && int(a.Secondary) == k {
				continue // k is now second best here
			}
			if int(a.Primary) != k || a.Secondary != b.Primary {
				t.Fatalf("table %d, backend %d's weight %d -> %d: row %#x went %v -> %v", i, k, tc.Backends[k].W(), up.Backends[k].W(), r, b, a)
			}
			moved++
		}
		if moved == 0 {
			t.Errorf("table %d: raising backend %d's weight moved no row", i, k)
		}
		if d := Compare([]*Table{before}, []*Table{after}); d.Tables[0].Rows.AtRisk != 0 {
			t.Errorf("table %d: %d rows at risk", i, d.Tables[0].Rows.AtRisk)
		}
	}
}

func ExampleBuild_weights() {
	tc := benchTable(3)
	tc.Backends[2].Weight = 2
	tab, _ := Build(tc)
	n := primaryShares(tab)
	fmt.Printf("weights 1, 1, 2: about %d%%, %d%%, %d%%\n", (n[0]*100+Rows/2)/Rows, (n[1]*100+Rows/2)/Rows, (n[2]*100+Rows/2)/Rows)
	// Output: weights 1, 1, 2: about 25%, 25%, 50%
}
