package table

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/dchest/siphash"
)

func mustKey(t testing.TB, s string) Key {
	var k Key
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		t.Fatal(err)
	}
	return k
}

// refRowSeed and refScore compute GLB's hashes with the reference SipHash.
func refRowSeed(seed Key, row uint32) []byte {
	k0, k1 := keyWords(seed)
	var in [4]byte
	binary.BigEndian.PutUint32(in[:], row)
	out := make([]byte, 8)
	binary.LittleEndian.PutUint64(out, siphash.Hash(k0, k1, in[:]))
	return out
}

func refScore(seed Key, row uint32, addr netip.Addr) uint64 {
	k0, k1 := keyWords(seed)
	msg := append(refRowSeed(seed, row), AddrBytes(addr)...)
	return bits.ReverseBytes64(siphash.Hash(k0, k1, msg))
}

// refRanking orders the non-inactive backends of a row by the reference score.
func refRanking(seed Key, row uint32, bs []Backend) []int {
	var idx []int
	for i, b := range bs {
		if b.State != StateInactive {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int {
		sa, sb := refScore(seed, row, bs[a].IP), refScore(seed, row, bs[b].IP)
		if sa != sb {
			if sa < sb {
				return -1
			}
			return 1
		}
		return bs[a].IP.Compare(bs[b].IP)
	})
	return idx
}

// refRow applies the documented rule to a full ranking.
func refRow(seed Key, row uint32, bs []Backend) Row {
	R := refRanking(seed, row, bs)
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

// glbRow is GLB's own builder rule, transcribed literally (including its
// comparison of the secondary's state with the health constant), to check
// equality under GLB's invariant.
func glbRow(seed Key, row uint32, bs []Backend) Row {
	R := refRanking(seed, row, bs)
	if len(R) < 2 {
		R = append(R, R[0])
	}
	glbState := func(s State) int {
		switch s {
		case StateFilling:
			return 0
		case StateActive:
			return 1
		}
		return 2
	}
	p, s := bs[R[0]], bs[R[1]]
	primaryBad := glbState(p.State) == 2 || !p.Healthy
	first := 0
	if primaryBad && glbState(s.State) == 1 {
		first = 1
	}
	return Row{uint32(R[first]), uint32(R[1-first])}
}

func TestGLBVectors(t *testing.T) {
	t.Parallel()
	seed := mustKey(t, "49a3d861d661ae5ab06ed9326871a2f5")
	k0, k1 := keyWords(seed)
	for _, c := range []struct {
		row  uint32
		want string
	}{{0x0000, "491c53a72df4c837"}, {0xffff, "f223c0cc65161620"}} {
		if got := hex.EncodeToString(refRowSeed(seed, c.row)); got != c.want {
			t.Errorf("reference row_seed(%#x) = %s, want %s", c.row, got, c.want)
		}
		var fast [8]byte
		binary.LittleEndian.PutUint64(fast[:], rowSeed(k0, k1, c.row))
		if got := hex.EncodeToString(fast[:]); got != c.want {
			t.Errorf("fast row_seed(%#x) = %s, want %s", c.row, got, c.want)
		}
	}

	names := map[string]string{"1.1.1.1": "a", "1.1.1.2": "b", "1.1.1.3": "c", "1.1.1.4": "d"}
	tc := &TableConfig{Seed: seed}
	for _, ip := range []string{"1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"} {
		tc.Backends = append(tc.Backends, Backend{IP: netip.MustParseAddr(ip), State: StateActive, Healthy: true})
	}
	b, err := NewBuilder(tc)
	if err != nil {
		t.Fatal(err)
	}
	tab := b.Table()
	for _, c := range []struct {
		row  uint32
		want string
	}{{0x0000, "dcba"}, {0xffff, "abdc"}, {0xbb44, "dabc"}} {
		got := ""
		for _, i := range refRanking(seed, c.row, tc.Backends) {
			got += names[tc.Backends[i].IP.String()]
		}
		if got != c.want {
			t.Errorf("ranking of row %#x = %s, want %s", c.row, got, c.want)
		}
		r := tab.Rows[c.row]
		hops := names[tab.Backends[r.Primary].IP.String()] + names[tab.Backends[r.Secondary].IP.String()]
		if hops != c.want[:2] {
			t.Errorf("row %#x hops = %s, want %s", c.row, hops, c.want[:2])
		}
	}
}

func TestFastSipHashMatchesReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		var seed Key
		for j := range seed {
			seed[j] = byte(rng.Uint32())
		}
		k0, k1 := keyWords(seed)
		row := rng.Uint32() // every 32-bit input, not only table rows
		var addr netip.Addr
		if i%2 == 0 {
			addr = netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
		} else {
			var a [16]byte
			for j := range a {
				a[j] = byte(rng.Uint32())
			}
			addr = netip.AddrFrom16(a)
		}
		w := wordsFor(AddrBytes(addr))
		if got, want := w.score(rowState(k0, k1, row)), refScore(seed, row, addr); got != want {
			t.Fatalf("score(%#x, %s) = %#x, reference %#x", row, addr, got, want)
		}
		// FlowHash over every length from 0 to 40 bytes.
		data := make([]byte, i%41)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if got, want := FlowHash(seed, data), siphash.Hash(k0, k1, data); got != want {
			t.Fatalf("FlowHash(len %d) = %#x, reference %#x", len(data), got, want)
		}
	}
}

// randomTable makes a table of n backends, a mix of IPv4 and IPv6 and of
// states, with at most maxBad backends that are not active and healthy.
func randomTable(rng *rand.Rand, n, maxBad int) *TableConfig {
	tc := &TableConfig{Name: "t"}
	for j := range tc.Seed {
		tc.Seed[j] = byte(rng.Uint32())
	}
	seen := map[netip.Addr]bool{}
	bad := 0
	for len(tc.Backends) < n {
		var addr netip.Addr
		if rng.IntN(4) == 0 {
			addr = netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(rng.IntN(256)), byte(rng.IntN(256))})
		} else {
			addr = netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		}
		if seen[addr] {
			continue
		}
		seen[addr] = true
		be := Backend{IP: addr, State: StateActive, Healthy: true}
		if bad < maxBad && rng.IntN(3) == 0 {
			bad++
			switch rng.IntN(5) {
			case 0:
				be.State = StateDraining
			case 1:
				be.State = StateInactive
			case 2:
				be.State = StateFilling
			case 3:
				be.Healthy = false
			case 4:
				be.State, be.Healthy = StateDraining, false
			}
		}
		tc.Backends = append(tc.Backends, be)
	}
	if checkBuildable(tc.Backends) != nil {
		tc.Backends[0].State = StateActive
	}
	return tc
}

// sampleRows is a fixed spread of rows checked against the slow reference
// (the full 65,536 would take minutes through the reference SipHash).
var sampleRows = func() []uint32 {
	rows := []uint32{0, 1, 0xbb44, 0xfffe, 0xffff}
	rng := rand.New(rand.NewPCG(7, 7))
	for len(rows) < 300 {
		rows = append(rows, uint32(rng.IntN(Rows)))
	}
	return rows
}()

func TestBuildMatchesReferenceRule(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 60; i++ {
		tc := randomTable(rng, 1+rng.IntN(12), rng.IntN(6))
		tab, err := Build(tc)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range sampleRows {
			if got, want := tab.Rows[r], refRow(tc.Seed, r, tc.Backends); got != want {
				t.Fatalf("table %d (%v) row %#x: got %v, reference %v", i, tc.Backends, r, got, want)
			}
		}
	}
}

func TestBuildEqualsGLBUnderItsInvariant(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 60; i++ {
		tc := randomTable(rng, 2+rng.IntN(12), 1)
		tab, err := Build(tc)
		if err != nil {
			t.Fatal(err)
		}
		if active := len(tc.Backends) - countState(tc.Backends, StateInactive); active < 2 {
			continue // GLB reads past its list with one backend; we define it
		}
		for _, r := range sampleRows {
			if got, want := tab.Rows[r], glbRow(tc.Seed, r, tc.Backends); got != want {
				t.Fatalf("table %d (%v) row %#x: got %v, GLB %v", i, tc.Backends, r, got, want)
			}
		}
	}
}

func countState(bs []Backend, s State) int {
	n := 0
	for _, b := range bs {
		if b.State == s {
			n++
		}
	}
	return n
}

func TestSingleBackend(t *testing.T) {
	t.Parallel()
	tc := &TableConfig{Backends: []Backend{
		{IP: netip.MustParseAddr("10.0.0.1"), State: StateInactive, Healthy: true},
		{IP: netip.MustParseAddr("10.0.0.2"), State: StateActive, Healthy: true},
	}}
	tab, err := Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	for r, row := range tab.Rows {
		if row != (Row{1, 1}) {
			t.Fatalf("row %d = %v, want both hops on the one backend", r, row)
		}
	}
}

func TestNoGoodBackendKeepsRanking(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 9))
	tc := randomTable(rng, 5, 0)
	for i := range tc.Backends {
		tc.Backends[i].Healthy = false
	}
	tab, err := Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	if tab.NoGoodRows != Rows {
		t.Fatalf("NoGoodRows = %d, want %d", tab.NoGoodRows, Rows)
	}
	for _, r := range sampleRows {
		R := refRanking(tc.Seed, r, tc.Backends)
		if want := (Row{uint32(R[0]), uint32(R[1])}); tab.Rows[r] != want {
			t.Fatalf("row %#x = %v, want %v", r, tab.Rows[r], want)
		}
	}
}

func TestAllInactiveIsError(t *testing.T) {
	t.Parallel()
	tc := &TableConfig{Backends: []Backend{{IP: netip.MustParseAddr("10.0.0.1"), State: StateInactive}}}
	if _, err := Build(tc); err == nil {
		t.Fatal("building a table of only inactive backends succeeded")
	}
}

func hopsAddr(t *Table, r int) [2]netip.Addr {
	row := t.Rows[r]
	return [2]netip.Addr{t.Backends[row.Primary].IP, t.Backends[row.Secondary].IP}
}

func sameTable(t *testing.T, what string, got, want *Table) {
	t.Helper()
	if len(got.Backends) != len(want.Backends) {
		t.Fatalf("%s: %d backends, want %d", what, len(got.Backends), len(want.Backends))
	}
	for r := range want.Rows {
		if got.Rows[r] != want.Rows[r] {
			t.Fatalf("%s: row %#x = %v, full build %v", what, r, got.Rows[r], want.Rows[r])
		}
	}
	if got.NoGoodRows != want.NoGoodRows {
		t.Fatalf("%s: NoGoodRows %d, full build %d", what, got.NoGoodRows, want.NoGoodRows)
	}
	if got.Balance != want.Balance || got.Digest != want.Digest {
		t.Fatalf("%s: balance %d digest %x, full build %d %x", what, got.Balance, got.Digest, want.Balance, want.Digest)
	}
}

// mutate returns a copy of tc with one random backend change, and a name for it.
func mutate(rng *rand.Rand, tc *TableConfig) (*TableConfig, string) {
	n := *tc
	n.Backends = append([]Backend(nil), tc.Backends...)
	for {
		switch op := rng.IntN(4); {
		case op == 0 && len(n.Backends) < MaxBackends:
			k := rng.IntN(len(n.Backends) + 1)
			for {
				addr := netip.AddrFrom4([4]byte{10, 9, byte(rng.IntN(256)), byte(rng.IntN(256))})
				if !slices.ContainsFunc(n.Backends, func(b Backend) bool { return b.IP == addr }) {
					be := Backend{IP: addr, State: []State{StateActive, StateFilling, StateDraining, StateInactive}[rng.IntN(4)], Healthy: rng.IntN(4) != 0,
						Domain: n.Backends[rng.IntN(len(n.Backends))].Domain}
					n.Backends = slices.Insert(n.Backends, k, be)
					return &n, fmt.Sprintf("insert %v at %d", be, k)
				}
			}
		case op == 1 && len(n.Backends) > 1:
			k := rng.IntN(len(n.Backends))
			rest := slices.Delete(slices.Clone(n.Backends), k, k+1)
			if checkBuildable(rest) != nil {
				continue
			}
			n.Backends = rest
			return &n, fmt.Sprintf("remove %d", k)
		case op == 2:
			k := rng.IntN(len(n.Backends))
			n.Backends[k].State = []State{StateActive, StateFilling, StateDraining, StateInactive}[rng.IntN(4)]
			n.Backends[k].Healthy = rng.IntN(3) != 0
			if checkBuildable(n.Backends) != nil {
				n.Backends[k] = tc.Backends[k]
				continue
			}
			return &n, fmt.Sprintf("set %d to %v/%v", k, n.Backends[k].State, n.Backends[k].Healthy)
		case op == 3:
			// A new weight: often back to every other one's (the table then
			// stops being weighted), else anything.
			k := rng.IntN(len(n.Backends))
			w := n.Backends[(k+1)%len(n.Backends)].W()
			if rng.IntN(2) == 0 {
				w = uint16(1 + rng.IntN([]int{3, 100, MaxWeight}[rng.IntN(3)]))
			}
			if w == n.Backends[k].W() {
				continue
			}
			n.Backends[k].Weight = w
			return &n, fmt.Sprintf("weight %d to %d", k, w)
		}
	}
}

func TestIncrementalEqualsFullBuild(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	iters := cases(300)
	if testing.Short() {
		iters = 40
	}
	b, err := NewBuilder(randomTable(rng, 8, 3))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < iters; i++ {
		if i%25 == 0 { // a fresh random table now and then, half of them in domains
			tc := randomTable(rng, 1+rng.IntN(40), rng.IntN(10))
			if i%50 == 25 {
				zoneTable(rng, tc, 2+rng.IntN(3))
			}
			if i%75 >= 50 { // a third with bounded load
				tc.Balance = uint16(MinBalance + rng.IntN(MaxBalance-MinBalance+1))
			}
			if b, err = NewBuilder(tc); err != nil {
				t.Fatal(err)
			}
		}
		cur := b.Config()
		next, what := mutate(rng, &cur)
		before := b.Table()
		inc, err := b.Update(next)
		if err != nil {
			t.Fatalf("step %d %s: %v", i, what, err)
		}
		if !inc {
			t.Fatalf("step %d %s: not applied incrementally", i, what)
		}
		full, err := Build(next)
		if err != nil {
			t.Fatal(err)
		}
		after := b.Table()
		sameTable(t, fmt.Sprintf("step %d %s", i, what), after, full)
		checkMovement(t, what, &cur, next, before, after)
	}
}

// checkMovement asserts rendezvous hashing's promise: adding a backend moves
// rows only onto it, removing one moves only its rows.
func checkMovement(t *testing.T, what string, old, new *TableConfig, before, after *Table) {
	t.Helper()
	if len(new.Backends) == len(old.Backends) || new.Balance != 0 {
		return // bounded load moves rows between others too (balance_test.go)
	}
	allGood := func(bs []Backend) bool {
		for _, b := range bs {
			if !b.Good() {
				return false
			}
		}
		return true
	}
	if !allGood(old.Backends) || !allGood(new.Backends) {
		return // with bad backends hops also shift between ranks
	}
	for r := range after.Rows {
		b, a := hopsAddr(before, r), hopsAddr(after, r)
		if b[0] == a[0] {
			continue
		}
		if len(new.Backends) > len(old.Backends) {
			if !slices.ContainsFunc(old.Backends, func(x Backend) bool { return x.IP == a[0] }) {
				continue // moved onto the new backend
			}
			t.Fatalf("%s: row %#x primary moved %s -> %s, not onto the added backend", what, r, b[0], a[0])
		}
		if slices.ContainsFunc(new.Backends, func(x Backend) bool { return x.IP == b[0] }) {
			t.Fatalf("%s: row %#x primary moved off %s, which was not removed", what, r, b[0])
		}
	}
}

func TestAddRemoveMovesOnlyThatBackend(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(13, 14))
	for i := 0; i < cases(30); i++ {
		tc := randomTable(rng, 2+rng.IntN(30), 0)
		before, _ := Build(tc)
		add := *tc
		add.Backends = append(slices.Clone(tc.Backends), Backend{IP: netip.MustParseAddr("192.0.2.200"), State: StateActive, Healthy: true})
		after, _ := Build(&add)
		checkMovement(t, "add", tc, &add, before, after)
		if len(tc.Backends) > 1 {
			rm := *tc
			k := rng.IntN(len(tc.Backends))
			rm.Backends = slices.Delete(slices.Clone(tc.Backends), k, k+1)
			after, _ := Build(&rm)
			checkMovement(t, "remove", tc, &rm, before, after)
		}
	}
}

func TestBackendOrderDoesNotMatter(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(15, 16))
	for i := 0; i < cases(30); i++ {
		tc := randomTable(rng, 1+rng.IntN(30), rng.IntN(8))
		a, _ := Build(tc)
		sh := *tc
		sh.Backends = slices.Clone(tc.Backends)
		rng.Shuffle(len(sh.Backends), func(i, j int) { sh.Backends[i], sh.Backends[j] = sh.Backends[j], sh.Backends[i] })
		b, _ := Build(&sh)
		for r := range a.Rows {
			if hopsAddr(a, r) != hopsAddr(b, r) {
				t.Fatalf("table %d row %#x: hops %v, shuffled %v", i, r, hopsAddr(a, r), hopsAddr(b, r))
			}
		}
		if Fingerprint(a) != Fingerprint(b) {
			t.Fatalf("table %d: fingerprint changed with backend order", i)
		}
	}
}

// TestFingerprintCoversTheKey: two tables with the same rows and different
// keys send flows to different hops, and their fingerprints differ; the
// fingerprint shows nothing of the key, and a table's fingerprint is
// its own the same whatever its name.
func TestFingerprintCoversTheKey(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(21, 22))
	tc := randomTable(rng, 8, 2)
	a, err := Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	b := &Table{Name: "other", HashKey: a.HashKey, Binds: a.Binds, Backends: a.Backends, Rows: a.Rows}
	if Fingerprint(a) != Fingerprint(b) {
		t.Fatal("the same key and rows under another name: fingerprints differ")
	}
	c := &Table{HashKey: a.HashKey, Binds: a.Binds, Backends: a.Backends, Rows: a.Rows}
	c.HashKey[15] ^= 1
	if Fingerprint(a) == Fingerprint(c) {
		t.Fatal("another key, the same rows: equal fingerprints")
	}
	fp := Fingerprint(a)
	for _, k := range []string{hex.EncodeToString(a.HashKey[:]), hex.EncodeToString(a.HashKey[:8]), hex.EncodeToString(a.HashKey[8:])} {
		if strings.Contains(fp, k) {
			t.Fatalf("the fingerprint %s shows the key", fp)
		}
	}
}

// randomRow is a random seed, row and that row's SipHash state.
func randomRow(rng *rand.Rand) (Key, uint32, sipState) {
	var seed Key
	for j := range seed {
		seed[j] = byte(rng.Uint32())
	}
	k0, k1 := keyWords(seed)
	row := uint32(rng.IntN(Rows))
	return seed, row, rowState(k0, k1, row)
}

func randomV4(rng *rand.Rand) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
}

// vectorUnit skips t, saying why, where this CPU has no vector scoring
// path (or the build is purego); with DIRECTOR_VECTOR_TESTS=required ('make
// test', on CI's AVX-512 machines) it fails instead, as kernel tests do.
func vectorUnit(t *testing.T) {
	t.Helper()
	if haveVectorScores {
		return
	}
	if os.Getenv("DIRECTOR_VECTOR_TESTS") == "required" {
		t.Fatal("no vector scoring path here (AVX-512F and BW, not purego), and DIRECTOR_VECTOR_TESTS=required")
	}
	t.Skip("no vector scoring path here (AVX-512F and BW, not purego): only the portable path exists")
}

func TestVectorScoresMatchReference(t *testing.T) {
	t.Parallel()
	vectorUnit(t)
	rng := rand.New(rand.NewPCG(21, 22))
	for i := 0; i < 200; i++ {
		seed, row, st := randomRow(rng)
		addrs := make([]netip.Addr, vectorWidth*(1+rng.IntN(3)))
		w := make([]uint64, len(addrs))
		for j := range addrs {
			addrs[j] = randomV4(rng)
			w[j] = wordsFor(AddrBytes(addrs[j])).w1
		}
		out := make([]uint64, len(w))
		masks := make([]uint16, len(w)/vectorWidth)
		thr := rng.Uint64()
		vectorScores(&st, w, out, thr, masks)
		for j, a := range addrs {
			want := refScore(seed, row, a)
			if got := out[j]; got != want {
				t.Fatalf("lane %d: %#x, reference %#x", j, got, want)
			}
			if flagged := masks[j/vectorWidth]>>(j%vectorWidth)&1 == 1; flagged != (want <= thr) {
				t.Fatalf("lane %d: score %#x, threshold %#x, flagged %v", j, want, thr, flagged)
			}
		}
	}
}

// TestVectorBest2MatchesReference checks the all-good rows' vector path:
// every score, and exactly the real scores at or under the second best
// flagged, whatever the padding scores.
func TestVectorBest2MatchesReference(t *testing.T) {
	t.Parallel()
	vectorUnit(t)
	rng := rand.New(rand.NewPCG(25, 26))
	for i := 0; i < 300; i++ {
		seed, row, st := randomRow(rng)
		n := 1 + rng.IntN(80)
		w := make([]uint64, (n+vectorWidth-1)/vectorWidth*vectorWidth)
		want := make([]uint64, n)
		for j := 0; j < n; j++ {
			a := randomV4(rng)
			w[j] = wordsFor(AddrBytes(a)).w1
			want[j] = refScore(seed, row, a)
		}
		for j := n; j < len(w); j++ {
			w[j] = rng.Uint64() // padding: must not count, whatever it scores
		}
		if i%10 == 0 && n > 2 {
			// A tie for second place: both must be flagged.
			j, k := rng.IntN(n), rng.IntN(n)
			for k == j {
				k = rng.IntN(n)
			}
			w[k], want[k] = w[j], want[j]
		}
		sorted := slices.Clone(want)
		slices.Sort(sorted)
		second := sorted[min(1, n-1)]
		if n == 1 {
			second = ^uint64(0)
		}
		out := make([]uint64, len(w))
		masks := make([]uint64, (len(w)+63)/64)
		tail := uint16(1)<<(n-(len(w)-vectorWidth)) - 1
		vectorBest2(&st, w, out, tail, masks)
		for j := 0; j < n; j++ {
			if out[j] != want[j] {
				t.Fatalf("case %d lane %d: %#x, reference %#x", i, j, out[j], want[j])
			}
			if flagged := masks[j/64]>>(j%64)&1 == 1; flagged != (want[j] <= second) {
				t.Fatalf("case %d (%d backends) lane %d: score %#x, second best %#x, flagged %v", i, n, j, want[j], second, flagged)
			}
		}
	}
}

// TestPortableAndVectorGoodBuildsAgree covers rankRowGood: IPv4 backends,
// all good, at sizes around the vector width and GLB's usual ones.
func TestPortableAndVectorGoodBuildsAgree(t *testing.T) {
	t.Parallel()
	vectorUnit(t) // else both builds are the portable one
	for _, v := range []bool{false, true} {
		if b, err := newBuilder(benchTable(3), v); err != nil || b.vector != v {
			t.Fatalf("newBuilder(tc, %v): vector %v (%v)", v, b.vector, err)
		}
	}
	for _, n := range []int{1, 2, 3, 15, 16, 17, 33, 64, 100, 256} {
		tc := benchTable(n)
		portable, err := buildWith(tc, false)
		if err != nil {
			t.Fatal(err)
		}
		fast, _ := buildWith(tc, true)
		sameTable(t, fmt.Sprintf("%d backends", n), fast, portable)
	}
}

func TestPortableAndVectorBuildsAgree(t *testing.T) {
	t.Parallel()
	vectorUnit(t) // else both builds are the portable one
	rng := rand.New(rand.NewPCG(23, 24))
	for i := 0; i < 6; i++ {
		tc := randomTable(rng, 1+rng.IntN(70), rng.IntN(10))
		portable, err := buildWith(tc, false)
		if err != nil {
			t.Fatal(err)
		}
		fast, _ := buildWith(tc, true)
		sameTable(t, fmt.Sprintf("table %d", i), fast, portable)
	}
}

// buildWith is Build, in the vector unit or not (where the CPU has one).
func buildWith(tc *TableConfig, vector bool) (*Table, error) {
	b, err := newBuilder(tc, vector)
	if err != nil {
		return nil, err
	}
	return b.Table(), nil
}
