package loader

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/director/director/bpf"
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
			if placeRH(slots, used, homeOf, home[k], k, probes) {
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
			for tb := 0; tb < MaxTables; tb++ {
				tables = append(tables, &table.Table{HashKey: table.Key{byte(tb)}})
				slots = append(slots, tb)
				for i := 0; i < table.MaxBinds; i++ {
					refs = append(refs, table.BindRef{Table: tb, Bind: c.bind(tb, i)})
				}
			}
			entries := table.CompileBinds(refs)
			wantExact := 0
			for _, e := range entries {
				if InExactTable(e) {
					wantExact++
				}
			}
			_, placed := buildExact(entries, tables, slots)
			groups := table.CompileGroups(refs)
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
			if gt.Nlens[0] == groupTrie || gt.Nlens[1] == groupTrie {
				t.Errorf("a family is left to the trie: %v", gt.Nlens)
			}
			// A place for all but one in a thousand.
			if lost := wantExact - placed; lost*1000 > wantExact {
				t.Errorf("%d of %d exact binds have no place", lost, wantExact)
			}
			if lost := withRanges - inTable; lost*1000 > withRanges {
				t.Errorf("%d of %d groups have no place", lost, withRanges)
			}
		})
	}
}

// collidingGroups returns n IPv4 addresses in 100.64.0.0/10 whose /32 TCP
// groups have the same home in the group table: more than its probes hold.
// (Their echo groups share a home too: the hash is linear in its words.)
func collidingGroups(n int) []netip.Addr {
	by := map[uint32][]netip.Addr{}
	for i := 0; i < 1<<22; i++ {
		a := netip.AddrFrom4([4]byte{100, 64 | byte(i>>16), byte(i >> 8), byte(i)})
		k := bpf.DirectorDirGroupKey{Proto: 6, Plen: 32}
		k.Family, k.Addr = putAddr(a)
		h := groupHash(k) & (groupSlots - 1)
		by[h] = append(by[h], a)
		if len(by[h]) == n {
			return by[h]
		}
	}
	panic("no colliding groups")
}

// fullWindowBinds binds each colliding address to its own port, so that a
// packet answered from another's group would go unbound.
func fullWindowBinds(addrs []netip.Addr) string {
	var s string
	for i, a := range addrs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf(`{"ip": %q, "proto": "tcp", "port": %d}, {"ip": %q, "proto": "tcp", "port_start": %d, "port_end": %d}`,
			a, 1000+i, a, 2000+10*i, 2005+10*i)
	}
	return s
}
