package bindmap

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/director/director/table"
)

// TestPlaceRH checks what the program's probes rely on, after filling
// tables of 1,024 slots to several loads with random homes: every placed
// entry lies within probes of its home with no empty slot between (a probe
// stops at an empty slot), and every dropped entry's probes are all full
// (the group table sends such a key to the trie).
func TestPlaceRH(t *testing.T) {
	const n, probes = 1024, 4
	for _, load := range []int{256, 512, 900, 1024, 1500} {
		rng := rand.New(rand.NewPCG(uint64(load), 1))
		slots := make([]int, n) // entries are 1..load; 0 is an empty slot
		home := map[int]uint32{}
		used := func(e *int) bool { return *e != 0 }
		homeOf := func(e *int) uint32 { return home[*e] }
		placed := 0
		for k := 1; k <= load; k++ {
			home[k] = rng.Uint32()
			if PlaceRH(slots, used, homeOf, home[k], k, probes) {
				placed++
			}
		}
		at := map[int]int{}
		for i, k := range slots {
			if k != 0 {
				at[k] = i
			}
		}
		if len(at) != placed && load <= n {
			t.Errorf("load %d: %d entries in the table, %d reported placed", load, len(at), placed)
		}
		for k := 1; k <= load; k++ {
			h := int(home[k] & (n - 1))
			i, ok := at[k]
			if !ok {
				for d := 0; d < probes; d++ {
					if slots[(h+d)&(n-1)] == 0 {
						t.Fatalf("load %d: entry %d was dropped, but slot %d of its probes is empty", load, k, d)
					}
				}
				continue
			}
			d := (i - h) & (n - 1)
			if d >= probes {
				t.Fatalf("load %d: entry %d is %d slots past its home", load, k, d)
			}
			for j := 0; j < d; j++ {
				if slots[(h+j)&(n-1)] == 0 {
					t.Fatalf("load %d: entry %d lies past an empty slot", load, k)
				}
			}
		}
		t.Logf("load %d of %d slots: %d dropped", load, n, load-len(at))
	}
}

// TestBindTablesAtLimits builds the exact and group tables of configs at
// the limits, 32 tables of 256 binds, and checks that all but one in a
// thousand binds have their place and that no family is left to the trie for want of room:
// the lookup's cost must not depend on how many binds there are.
func TestBindTablesAtLimits(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	configs := []struct {
		name string
		bind func(tbl, i int) table.Bind
	}{
		{"exact, an address each, in order", func(tbl, i int) table.Bind {
			a := netip.AddrFrom4([4]byte{10, byte(tbl), byte(i >> 8), byte(i)})
			return table.Bind{Prefix: netip.PrefixFrom(a, 32), Proto: 6, PortStart: 80, PortEnd: 80}
		}},
		{"exact, an address each, random", func(tbl, i int) table.Bind {
			a := netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
			return table.Bind{Prefix: netip.PrefixFrom(a, 32), Proto: 6, PortStart: 80, PortEnd: 80}
		}},
		{"IPv6, exact and ranges", func(tbl, i int) table.Bind {
			var b [16]byte
			b[0], b[1], b[2], b[14], b[15] = 0xfd, byte(tbl), byte(i), byte(rng.Uint32()), byte(i)
			bd := table.Bind{Prefix: netip.PrefixFrom(netip.AddrFrom16(b), 128), Proto: 6, PortStart: 443, PortEnd: 443}
			if i%2 == 1 {
				bd.PortStart, bd.PortEnd = 8000, 9000
			}
			return bd
		}},
		{"GLB-like: ports, a range and a /24 per address", func(tbl, i int) table.Bind {
			a := netip.AddrFrom4([4]byte{172, 16 + byte(tbl), byte(i / 4), 1})
			switch i % 4 {
			case 0:
				return table.Bind{Prefix: netip.PrefixFrom(a, 32), Proto: 6, PortStart: 80, PortEnd: 80}
			case 1:
				return table.Bind{Prefix: netip.PrefixFrom(a, 32), Proto: 6, PortStart: 443, PortEnd: 443}
			case 2:
				return table.Bind{Prefix: netip.PrefixFrom(a, 32), Proto: 6, PortStart: 8000, PortEnd: 9000}
			}
			return table.Bind{Prefix: netip.PrefixFrom(a, 24), Proto: 17, PortStart: 53, PortEnd: 53}
		}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			var refs []table.BindRef
			var tables []*table.Table
			var slots []int
			for tb := 0; tb < maxTables; tb++ {
				tables = append(tables, &table.Table{HashKey: table.Key{byte(tb)}})
				slots = append(slots, tb)
				for i := 0; i < table.MaxBinds; i++ {
					refs = append(refs, table.BindRef{Table: tb, Bind: c.bind(tb, i)})
				}
			}
			entries := Compile(refs)
			groups := Groups(refs)
			points := ExactPoints(refs, entries, groups, true)
			wantExact := len(points)
			if wantExact > ExactBudget {
				t.Errorf("%d exact points, more than the budget of %d", wantExact, ExactBudget)
			}
			_, placed := buildExact(points, tables, slots)
			gt := buildGroups(groups, tables, slots)
			inTable := 0
			for _, e := range gt.E {
				if e.Count > 0 {
					inTable++
				}
			}
			withRanges := 0
			for _, g := range groups {
				if len(g.Ranges) > 0 {
					withRanges++
				}
			}
			t.Logf("exact: %d of %d placed (%d slots); groups: %d of %d placed (%d slots); lengths %v",
				placed, wantExact, len(gt.E)/2, inTable, withRanges, len(gt.E), gt.Nlens)
			if gt.Nlens[0] == GroupTrie || gt.Nlens[1] == GroupTrie {
				t.Errorf("a family is left to the trie: %v", gt.Nlens)
			}
			// A place for all but one in a thousand.
			if lost := wantExact - placed; lost*1000 > wantExact {
				t.Errorf("%d of %d exact points have no place", lost, wantExact)
			}
			if lost := withRanges - inTable; lost*1000 > withRanges {
				t.Errorf("%d of %d groups have no place", lost, withRanges)
			}
		})
	}
}

// TestExactPointsAnswerAsResolveBind checks the exact table's contents on
// random configs of nested prefixes and overlapping port ranges: every
// point answers as table.ResolveBind does, no key is there twice, the
// budget holds, and exact binds all come first.
func TestExactPointsAnswerAsResolveBind(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for c := 0; c < 200; c++ {
		var refs []table.BindRef
		for i := 0; i < 1+rng.IntN(12); i++ {
			proto := table.ProtoTCP
			if rng.IntN(3) == 0 {
				proto = table.ProtoUDP
			}
			var p netip.Prefix
			if rng.IntN(4) == 0 {
				a := netip.AddrFrom16([16]byte{0x20, 0x01, 0xd, 0xb8, 15: byte(rng.IntN(4))})
				p = netip.PrefixFrom(a, 120+rng.IntN(9))
			} else {
				a := netip.AddrFrom4([4]byte{198, 18, byte(rng.IntN(2)), byte(rng.IntN(256))})
				p = netip.PrefixFrom(a, []int{22, 24, 26, 30, 32, 32}[rng.IntN(6)])
			}
			lo := uint16(rng.IntN(100))
			hi := lo
			if rng.IntN(2) == 0 {
				hi += uint16(rng.IntN(2000))
			}
			r := table.BindRef{Table: rng.IntN(3), Bind: table.Bind{Prefix: p, Proto: proto, PortStart: lo, PortEnd: hi}}
			// A config may not have two tables claim one prefix,
			// protocol and port.
			clash := false
			for _, o := range refs {
				ob := o.Bind
				clash = clash || (o.Table != r.Table && ob.Proto == proto && ob.Prefix.Masked() == p.Masked() && ob.PortStart <= hi && lo <= ob.PortEnd)
			}
			if !clash {
				refs = append(refs, r)
			}
		}
		entries := Compile(refs)
		points := ExactPoints(refs, entries, Groups(refs), true)
		if len(points) > ExactBudget {
			t.Fatalf("config %d: %d points, budget %d", c, len(points), ExactBudget)
		}
		type key struct {
			proto table.Proto
			addr  netip.Addr
			port  uint16
		}
		seen := map[key]bool{}
		exact := 0
		for _, e := range entries {
			if InExactTable(e) {
				exact++
			}
		}
		for i, p := range points {
			k := key{p.Proto, p.Addr, p.Port}
			if seen[k] {
				t.Fatalf("config %d: %v %v:%d twice", c, p.Proto, p.Addr, p.Port)
			}
			seen[k] = true
			want, ok := table.ResolveBind(refs, p.Addr, p.Proto, p.Port, false)
			if !ok || want != p.Table {
				t.Fatalf("config %d, point %d (exact binds: %d): %v %v:%d answers table %d, ResolveBind %d (bound %v)\nbinds: %v",
					c, i, exact, p.Proto, p.Addr, p.Port, p.Table, want, ok, refs)
			}
		}
	}
}

// TestExactPointsSpellOutSmallBinds: with room, loader's bindsConfig (an
// exact port, a port range, a /24) has its range and its /24 in the exact
// table whole, and GLB's example the
// addresses its prefixes are written with; at the limits (a full budget of
// exact binds) nothing is spelled out.
func TestExactPointsSpellOutSmallBinds(t *testing.T) {
	ref := func(p string, lo, hi uint16) table.BindRef {
		return table.BindRef{Bind: table.Bind{Prefix: netip.MustParsePrefix(p), Proto: table.ProtoTCP, PortStart: lo, PortEnd: hi}}
	}
	refs := []table.BindRef{ref("192.0.2.1/32", 80, 80), ref("192.0.2.1/32", 8000, 9000), ref("198.18.0.0/24", 80, 80)}
	points := ExactPoints(refs, Compile(refs), Groups(refs), true)
	if want := 1 + 1001 + 256; len(points) != want {
		t.Fatalf("%d points, want %d", len(points), want)
	}
	// GLB's example: a /24 with 1,001 ports is too large whole, but the
	// address it is written with, the one GLB serves, goes in; so does a
	// written address with host bits, with the ranges of its own longest
	// group (the /26 holding it, not its /24).
	udp := func(p string, lo, hi uint16, tbl int) table.BindRef {
		return table.BindRef{Table: tbl, Bind: table.Bind{Prefix: netip.MustParsePrefix(p), Proto: table.ProtoUDP, PortStart: lo, PortEnd: hi}}
	}
	glb := []table.BindRef{ref("10.10.10.10/32", 80, 80), udp("10.10.20.0/24", 1000, 2000, 0),
		udp("10.10.30.77/24", 1000, 2000, 0), udp("10.10.30.64/26", 1500, 1500, 1)}
	points = ExactPoints(glb, Compile(glb), Groups(glb), true)
	got := map[string]int{}
	for _, p := range points {
		got[fmt.Sprintf("%s:%d", p.Addr, p.Port)] = p.Table + 1
	}
	for at, want := range map[string]int{"10.10.10.10:80": 1, "10.10.20.0:1000": 1, "10.10.20.0:2000": 1, "10.10.20.1:1000": 0,
		"10.10.30.77:1000": 1, "10.10.30.77:1500": 2, "10.10.30.64:1500": 2, "10.10.30.76:1500": 0} {
		if got[at] != want {
			t.Errorf("%s: table %d (0: not in the exact table), want %d", at, got[at]-1, want-1)
		}
	}
	if want := 1 + 3*1001; len(points) != want { // the /26's own address too
		t.Errorf("GLB's example: %d points, want %d", len(points), want)
	}

	var full []table.BindRef
	for i := 0; i < ExactBudget; i++ {
		full = append(full, ref(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 32).String(), 80, 80))
	}
	full = append(full, refs[1:]...)
	if points := ExactPoints(full, Compile(full), Groups(full), true); len(points) != ExactBudget {
		t.Fatalf("at the limits: %d points, want the %d exact binds", len(points), ExactBudget)
	}
}

// BenchmarkExactPoints times what spelling binds out adds to an apply:
// the three binds of loader's bindsConfig (1,258 points), and 32 /24s of
// one port each, which fill the budget (8,192 points).
func BenchmarkExactPoints(b *testing.B) {
	ref := func(p string, lo, hi uint16) table.BindRef {
		return table.BindRef{Bind: table.Bind{Prefix: netip.MustParsePrefix(p), Proto: table.ProtoTCP, PortStart: lo, PortEnd: hi}}
	}
	small := []table.BindRef{ref("192.0.2.1/32", 80, 80), ref("192.0.2.1/32", 8000, 9000), ref("198.18.0.0/24", 80, 80)}
	var full []table.BindRef
	for i := 0; i < 32; i++ {
		full = append(full, ref(fmt.Sprintf("10.%d.0.0/24", i), 443, 443))
	}
	for _, c := range []struct {
		name string
		refs []table.BindRef
	}{{"bindsconfig", small}, {"full-budget", full}} {
		entries, groups := Compile(c.refs), Groups(c.refs)
		tables := []*table.Table{{}}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				et, _ := buildExact(ExactPoints(c.refs, entries, groups, true), tables, []int{0})
				exactTables.Put(et)
			}
		})
	}
}

// maxTables is the datapath's table count (loader/mapimage.MaxTables).
const maxTables = 32
