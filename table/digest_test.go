package table

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestInputDigest: every input that decides a table changes its digest,
// as does the fingerprint it is bound to and the seed that keys it; what
// decides no row (health checks, the ramp interval) does not; and the
// digest holds neither key nor seed.
func TestInputDigest(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	base := randomTable(rng, 6, 2)
	base.Name = "api"
	base.Binds = []Bind{{Prefix: netip.MustParsePrefix("10.0.0.1/32"), Proto: ProtoTCP, PortStart: 80, PortEnd: 80}}
	fp := "0123"
	d0 := InputDigest(base, nil, fp)
	clone := func() *TableConfig {
		c := *base
		c.Backends = append([]Backend(nil), base.Backends...)
		c.Binds = append([]Bind(nil), base.Binds...)
		return &c
	}
	for what, change := range map[string]func(c *TableConfig){
		"name":     func(c *TableConfig) { c.Name = "web" },
		"hash key": func(c *TableConfig) { c.HashKey[3]++ },
		"seed":     func(c *TableConfig) { c.Seed[3]++ },
		"bind":     func(c *TableConfig) { c.Binds[0].PortEnd = 81 },
		"address":  func(c *TableConfig) { c.Backends[2].IP = netip.MustParseAddr("192.0.2.99") },
		"state": func(c *TableConfig) {
			if c.Backends[2].State == StateDraining {
				c.Backends[2].State = StateActive
			} else {
				c.Backends[2].State = StateDraining
			}
		},
		"health":  func(c *TableConfig) { c.Backends[2].Healthy = !c.Backends[2].Healthy },
		"weight":  func(c *TableConfig) { c.Backends[2].Weight = 7 },
		"domain":  func(c *TableConfig) { c.Backends[2].Domain = "rack-z" },
		"order":   func(c *TableConfig) { c.Backends[1], c.Backends[2] = c.Backends[2], c.Backends[1] },
		"removed": func(c *TableConfig) { c.Backends = c.Backends[:5] },
	} {
		c := clone()
		change(c)
		if InputDigest(c, nil, fp) == d0 {
			t.Errorf("a changed %s leaves the digest as it was", what)
		}
	}
	if InputDigest(base, nil, "4567") == d0 {
		t.Error("the digest is not bound to the fingerprint")
	}
	if InputDigest(base, []Row{{0, 1}}, fp) == d0 || InputDigest(base, []Row{{0, 1}}, fp) == InputDigest(base, []Row{{1, 0}}, fp) {
		t.Error("the digest is not bound to the rows")
	}
	bc := clone()
	bc.Balance = 1010
	if InputDigest(bc, nil, fp) == d0 {
		t.Error("a balance factor leaves the digest as it was")
	}
	c := clone()
	port := 80
	c.Backends[0].Healthchecks = &Healthchecks{HTTP: &port}
	c.History = HistorySettings{Window: 5, NoHops: true}
	if InputDigest(c, nil, fp) != d0 {
		t.Error("health checks or the history settings changed the digest")
	}
	if bytes.Contains(d0[:], base.HashKey[:4]) || bytes.Contains(d0[:], base.Seed[:4]) {
		t.Error("the digest holds the key or the seed")
	}
}

// TestBuiltFromTrustsOnlyABoundFingerprint: a live table whose rows and
// inputs its digest binds takes the fingerprint its registry claims; a
// claim the digest does not bind is not taken (the fingerprint is
// computed), and rows, backends or a digest that differ are not the
// config's table whatever the claim.
func TestBuiltFromTrustsOnlyABoundFingerprint(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(8, 9))
	tc := randomTable(rng, 12, 2)
	built, err := Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	fp := Fingerprint(built)
	live := func(mutate func(*Table)) *Table {
		l := &Table{Name: built.Name, HashKey: built.HashKey, Binds: built.Binds, Backends: slices.Clone(built.Backends),
			Rows: slices.Clone(built.Rows), NoGoodRows: built.NoGoodRows, Digest: built.Digest, Balance: built.Balance, Claimed: fp}
		if mutate != nil {
			mutate(l)
		}
		return l
	}
	if l := live(nil); !l.BuiltFrom(tc) || Fingerprint(l) != fp {
		t.Fatal("the live copy of a built table is not its config's")
	}
	wrong := strings.Repeat("ab", 32)
	if l := live(func(l *Table) { l.Claimed = wrong }); !l.BuiltFrom(tc) || Fingerprint(l) != fp {
		t.Errorf("a wrong claimed fingerprint was taken (%s), or the table refused", ShortFingerprint(Fingerprint(l)))
	}
	for what, mutate := range map[string]func(*Table){
		"a row":        func(l *Table) { l.Rows[77].Primary, l.Rows[77].Secondary = l.Rows[77].Secondary, l.Rows[77].Primary },
		"the backends": func(l *Table) { l.Backends[0], l.Backends[1] = l.Backends[1], l.Backends[0] },
		"the key":      func(l *Table) { l.HashKey[0]++ },
		"the digest":   func(l *Table) { l.Digest[5]++ },
		"the balance":  func(l *Table) { l.Balance = 1500 },
	} {
		if l := live(mutate); l.BuiltFrom(tc) {
			t.Errorf("a live table with %s changed passes for its config's", what)
		}
	}
	other := *tc
	other.Seed[0]++
	if live(nil).BuiltFrom(&other) {
		t.Error("a table passes for one with another seed")
	}
}

// TestFromBuiltTakesOnlyRowsThatCheckOut carries a built table's rows as a
// plan does and takes them back; rows changed, a digest changed, rows
// for another config, or rows naming a backend the config lacks are not
// taken.
func TestFromBuiltTakesOnlyRowsThatCheckOut(t *testing.T) {
	t.Parallel()
	c, _ := parseConfig([]byte(glbCompatConfig))
	tc := c.Tables[0]
	built, err := Build(&tc)
	if err != nil {
		t.Fatal(err)
	}
	key := Sealer("0123456789abcdef0123456789abcdef")
	carried := CarryBuilt([]*Table{built}, nil, key)
	if len(carried) != 1 || carried[0].Index != 0 {
		t.Fatalf("carried %d tables", len(carried))
	}
	if CarryBuilt([]*Table{built}, nil, nil) != nil {
		t.Fatal("rows carried without a key")
	}
	if CarryBuilt([]*Table{built}, []*Table{built}, key) != nil {
		t.Fatal("a table taken from the base is carried")
	}
	got := FromBuilt(carried, 0, &tc, key)
	if got == nil {
		t.Fatal("the rows a build carried were not taken back")
	}
	if Fingerprint(got) != Fingerprint(built) || got.Digest != built.Digest || got.NoGoodRows != built.NoGoodRows || !slices.Equal(got.Rows, built.Rows) {
		t.Fatal("the table taken back is not the one built")
	}
	if FromBuilt(carried, 1, &tc, key) != nil {
		t.Error("rows carried for table 0 taken for table 1")
	}
	bad := func(what string, f func(b *BuiltRows)) {
		t.Helper()
		b := carried[0]
		b.Rows = slices.Clone(b.Rows)
		f(&b)
		if FromBuilt([]BuiltRows{b}, 0, &tc, key) != nil {
			t.Errorf("%s: taken", what)
		}
	}
	r := 2 * 1234
	bad("a row's primary changed", func(b *BuiltRows) { b.Rows[r] = (b.Rows[r] + 1) % byte(len(tc.Backends)) })
	bad("a row naming no backend", func(b *BuiltRows) { b.Rows[r] = byte(len(tc.Backends)) })
	bad("rows cut short", func(b *BuiltRows) { b.Rows = b.Rows[:len(b.Rows)-2] })
	bad("another digest", func(b *BuiltRows) { b.Digest = strings.Repeat("00", 32) })
	bad("a digest that is not hex", func(b *BuiltRows) { b.Digest = "zz" })
	bad("no seal", func(b *BuiltRows) { b.Seal = "" })
	// Rows of one's own with the digest the seed (in the plan file) makes
	// for them: the seal, which takes the host's key, gives them away.
	bad("rows forged with their digest", func(b *BuiltRows) {
		b.Rows[r] = (b.Rows[r] + 1) % byte(len(tc.Backends))
		forged := &Table{Name: tc.Name, HashKey: tc.HashKey, Binds: tc.Binds, Backends: tc.Backends, Rows: make([]Row, Rows), Balance: tc.Balance}
		for i := range forged.Rows {
			forged.Rows[i] = Row{Primary: uint32(b.Rows[2*i]), Secondary: uint32(b.Rows[2*i+1])}
		}
		d := InputDigest(&tc, forged.Rows, Fingerprint(forged))
		b.Digest = hex.EncodeToString(d[:])
	})
	if FromBuilt(carried, 0, &tc, Sealer("another host's key, 32 bytes....")) != nil {
		t.Error("rows sealed by another host's key taken")
	}
	other := tc
	other.Backends = slices.Clone(tc.Backends)
	other.Backends[0].State = StateDraining
	if FromBuilt(carried, 0, &other, key) != nil {
		t.Error("rows carried for a config taken for another")
	}
}
