// Package bindmap compiles the tables' binds into the datapath's bind maps
// (bpf/director.h): the two-stage lookup's entries (compile.go), and for a
// set of tables in their slots, what the exact table, the group table and
// the trie hold, and where each entry sits (layout.go). It is pure Go: the
// loader only writes what it returns into the bind maps of the inactive
// generation.
package bindmap

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sort"
	"sync"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/table"
)

// Geometry of the exact-match table (enum dir_limit in director.h).
const (
	ExactSlots  = abi.ExactSlots
	ExactProbes = abi.ExactProbes
)

func exactKey(proto table.Proto, addr netip.Addr, port uint16) abi.ExactKey {
	k := abi.ExactKey{Proto: uint8(proto), Port: port<<8 | port>>8}
	k.Family, k.Addr = PutAddr(addr)
	return k
}

// ExactHash is the C exact_hash: the key's five 32-bit words, read in host
// (little-endian) order, each times its constant, summed in 64 bits, the
// halves folded.
func ExactHash(k abi.ExactKey) uint32 {
	var b [20]byte
	b[0], b[1] = k.Proto, k.Family
	binary.LittleEndian.PutUint16(b[2:], k.Port)
	copy(b[4:], k.Addr[:])
	var h uint64
	for i := 0; i < 5; i++ {
		h += uint64(binary.LittleEndian.Uint32(b[4*i:])) * abi.ExactMult[i]
	}
	return uint32(h>>32) ^ uint32(h)
}

// InExactTable reports whether the exact table is for e, a compiled bind
// entry (it holds e when there is room): binds to one address and one
// port. Echo entries are left to their groups, which hold every port.
func InExactTable(e Entry) bool {
	return e.Exact && e.Proto != table.ProtoICMP && e.Proto != table.ProtoICMPv6
}

// ExactBudget is how many entries the exact table is given: half its
// slots, where Robin Hood placement over ExactProbes drops next to nothing
// (see PlaceRH).
const ExactBudget = int(ExactSlots / 2)

// ExactPoint is one key of the exact table, and the table (an index into
// the applied tables) it answers with.
type ExactPoint struct {
	Proto table.Proto
	Addr  netip.Addr
	Port  uint16
	Table int
}

// ExactPoints lists what the exact table holds for binds refs, compiled
// (entries: Compile, groups: Groups). First every
// exact bind (InExactTable). Then, while the table stays within
// ExactBudget, prefix and port-range binds spelled out point by point, as
// GLB spells out port ranges: every (address, port) of a group whose
// addresses no longer group of its protocol holds, with the table the
// group's ranges give, which is the answer the group path gives for it. A
// group goes in whole or not at all, the smallest first. Last, for a
// prefix too large to go in whole, the address it is written with, which
// is the one address GLB serves for it (GLB ignores the prefix length):
// a fleet moved from GLB sends that prefix's traffic there.
//
// So with room, a prefix or range bind costs what an exact one does; with
// none (8,192 exact binds) nothing changes. Whatever the exact table does
// not hold goes to the group path, which holds every bind: the exact table
// makes answers faster, never different.
//
// With spell false, only the exact binds go in (tests of the group table
// and the trie ask so, so that their packets go there).
func ExactPoints(refs []table.BindRef, entries []Entry, groups []Group, spell bool) []ExactPoint {
	var out []ExactPoint
	for _, e := range entries {
		if InExactTable(e) {
			out = append(out, ExactPoint{e.Proto, e.Prefix.Addr(), e.Port, e.Table})
		}
	}
	if !spell {
		return out
	}
	sp := newSpeller(groups)
	out = sp.wholeGroups(out, ExactBudget-len(out))
	return sp.writtenAddresses(out, refs)
}

// speller spells groups out into exact points (ExactPoints).
type speller struct {
	lens  map[lensKey][]int   // the prefix lengths of each protocol's groups
	have  map[spellKey]*Group // the groups, by protocol and prefix
	cands []cand              // the groups that may go in whole, smallest first
	whole map[*Group]bool     // the groups that went in whole
	room  int                 // points left within ExactBudget
}

// Map keys without pointers (netip values hold one), which the garbage
// collector would scan.
type lensKey struct {
	proto table.Proto
	v6    bool
}

type spellKey struct {
	proto table.Proto
	bits  uint8
	addr  [16]byte
}

// cand is a group that may go in whole, with how many points it would add
// at most.
type cand struct {
	g    *Group
	size int
}

func newSpeller(groups []Group) *speller {
	sp := &speller{lens: map[lensKey][]int{}, have: map[spellKey]*Group{}, whole: map[*Group]bool{}}
	for i := range groups {
		g := &groups[i]
		if g.Proto == table.ProtoICMP || g.Proto == table.ProtoICMPv6 {
			continue
		}
		lk := lensKey{g.Proto, g.Prefix.Addr().Is6()}
		if !slices.Contains(sp.lens[lk], g.Prefix.Bits()) {
			sp.lens[lk] = append(sp.lens[lk], g.Prefix.Bits())
		}
		sp.have[spellKey{g.Proto, uint8(g.Prefix.Bits()), g.Prefix.Addr().As16()}] = g
		host := g.Prefix.Addr().BitLen() - g.Prefix.Bits()
		if len(g.Ranges) == 0 || host >= 16 {
			continue
		}
		sp.cands = append(sp.cands, cand{g, portsOf(g) << host})
	}
	sort.SliceStable(sp.cands, func(i, j int) bool { return sp.cands[i].size < sp.cands[j].size })
	return sp
}

// portsOf is how many ports g's ranges cover.
func portsOf(g *Group) int {
	ports := 0
	for _, r := range g.Ranges {
		ports += int(r.Hi) - int(r.Lo) + 1
	}
	return ports
}

// group is proto's group of prefix a/bits, nil if none.
func (sp *speller) group(proto table.Proto, a netip.Addr, bits int) *Group {
	q, _ := a.Prefix(bits)
	return sp.have[spellKey{proto, uint8(bits), q.Addr().As16()}]
}

// shadowed reports whether a longer group of proto holds a: its packets
// are that group's.
func (sp *speller) shadowed(proto table.Proto, a netip.Addr, bits int) bool {
	for _, l := range sp.lens[lensKey{proto, a.Is6()}] {
		if l > bits && sp.group(proto, a, l) != nil {
			return true
		}
	}
	return false
}

// longest is a's longest group of proto: the one that answers for it.
func (sp *speller) longest(proto table.Proto, a netip.Addr) *Group {
	var best *Group
	for _, l := range sp.lens[lensKey{proto, a.Is6()}] {
		if g := sp.group(proto, a, l); g != nil && (best == nil || l > best.Prefix.Bits()) {
			best = g
		}
	}
	return best
}

// wholeGroups adds the groups that fit in room whole, smallest first: each
// address of a group that no longer group holds, at every port of its
// ranges.
func (sp *speller) wholeGroups(out []ExactPoint, room int) []ExactPoint {
	// An address's own group holds its exact binds' ports, which are in
	// already. Only such groups can repeat a point: any other address's
	// points come from its longest group alone.
	type pointKey struct {
		proto table.Proto
		port  uint16
		addr  [16]byte
	}
	var exact map[pointKey]bool
	total := 0
	for _, c := range sp.cands {
		total += c.size
	}
	out = slices.Grow(out, min(room, total))
	for _, c := range sp.cands {
		if c.size > room {
			break // the rest are no smaller
		}
		g := c.g
		sp.whole[g] = true
		a := g.Prefix.Addr()
		single := g.Prefix.IsSingleIP()
		if single && exact == nil {
			exact = make(map[pointKey]bool, len(out))
			for _, p := range out {
				exact[pointKey{p.Proto, p.Port, p.Addr.As16()}] = true
			}
		}
		for range 1 << (a.BitLen() - g.Prefix.Bits()) {
			if !sp.shadowed(g.Proto, a, g.Prefix.Bits()) {
				for _, r := range g.Ranges {
					for port := int(r.Lo); port <= int(r.Hi); port++ {
						if single && exact[pointKey{g.Proto, uint16(port), a.As16()}] {
							continue
						}
						out = append(out, ExactPoint{g.Proto, a, uint16(port), r.Table})
						room--
					}
				}
			}
			a = a.Next()
		}
	}
	sp.room = room
	return out
}

// writtenAddresses adds, while there is room, the addresses prefixes are
// written with, where their whole groups did not go in: each with the
// ranges of its own longest group, smallest first.
func (sp *speller) writtenAddresses(out []ExactPoint, refs []table.BindRef) []ExactPoint {
	type written struct {
		proto table.Proto
		addr  netip.Addr
		g     *Group
		size  int
	}
	var ws []written
	seen := map[spellKey]bool{}
	for _, r := range refs {
		b := r.Bind
		a := b.Prefix.Addr()
		k := spellKey{b.Proto, 0, a.As16()}
		if b.Prefix.IsSingleIP() || seen[k] {
			continue
		}
		seen[k] = true
		g := sp.longest(b.Proto, a)
		if g == nil || sp.whole[g] || g.Prefix.IsSingleIP() {
			continue // in already, or an address's own group: in whole or not at all
		}
		ws = append(ws, written{b.Proto, a, g, portsOf(g)})
	}
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].size < ws[j].size })
	for _, w := range ws {
		if w.size > sp.room {
			break
		}
		for _, pr := range w.g.Ranges {
			for port := int(pr.Lo); port <= int(pr.Hi); port++ {
				out = append(out, ExactPoint{w.proto, w.addr, uint16(port), pr.Table})
			}
		}
		sp.room -= w.size
	}
	return out
}

// buildExact places the exact table's points (ExactPoints) in an
// open-addressing table, Robin Hood style (PlaceRH). A point that finds no
// slot within ExactProbes of its home is left out: the group path, which
// holds every bind, answers for it. It returns how many were placed.
func buildExact(points []ExactPoint, tables []*table.Table, slots []int) (*abi.ExactTable, int) {
	t := exactTables.Get().(*abi.ExactTable)
	*t = abi.ExactTable{}
	used := func(e *abi.ExactEntry) bool { return e.SlotPlus1 != 0 }
	home := func(e *abi.ExactEntry) uint32 { return ExactHash(e.Key) }
	states := make([][4]uint64, len(tables))
	for i, tb := range tables {
		states[i] = table.FlowHashState(tb.HashKey)
	}
	placed := 0
	for _, p := range points {
		k := exactKey(p.Proto, p.Addr, p.Port)
		v := abi.ExactEntry{Key: k, SlotPlus1: uint32(slots[p.Table]) + 1, HashState: states[p.Table]}
		if PlaceRH(t.E[:], used, home, ExactHash(k), v, int(ExactProbes)) {
			placed++
		}
	}
	return t, placed
}

// The exact and group tables are megabytes, built at every apply: their
// memory is reused (the caller puts a table back once it is written)
// rather than allocated, which made the garbage collector's assists a
// tenth of a health flip's time.
var (
	exactTables = sync.Pool{New: func() any { return new(abi.ExactTable) }}
	groupTables = sync.Pool{New: func() any { return new(abi.GroupTable) }}
)

// PlaceRH puts e, whose home index is h, in the open-addressing table
// slots (a power of two long; used says whether a slot holds an entry,
// home gives an entry's home index), where the program looks for an entry
// in the probes slots from its home and stops at an empty one. Robin Hood:
// an entry further from its home takes the slot of one nearer to its own,
// which moves on. An entry that would go probes or more past its home is
// dropped (this one or one it moved): it returns false then. A dropped
// entry's probes are all full, and stay so, which the group table's lookup
// relies on. At half full, with eight probes, it drops next to nothing
// where taking the first free slot drops about one entry in 200 (a
// simulation of 16,384 entries in 32,768 slots, five runs: 0-1 against
// 71-99; with four probes, 60-94 against 406-470).
func PlaceRH[T any](slots []T, used func(*T) bool, home func(*T) uint32, h uint32, e T, probes int) bool {
	mask := uint32(len(slots) - 1)
	at := h & mask
	for d := uint32(0); d < uint32(probes); d++ {
		i := (at + d) & mask
		if !used(&slots[i]) {
			slots[i] = e
			return true
		}
		oh := home(&slots[i]) & mask
		if od := (i - oh) & mask; od < d {
			slots[i], e = e, slots[i]
			at, d = oh, od
		}
	}
	return false
}

// Geometry of the group table (enum dir_limit in director.h).
const (
	GroupSlots  = abi.GroupSlots
	GroupProbes = abi.GroupProbes
	groupLens   = abi.GroupLens
	groupRanges = abi.GroupRanges
	groupScan   = abi.GroupScan
	GroupTrie   = abi.GroupTrie
)

// GroupHash is the C exact_hash of a group key, whose words are laid out as
// an exact key's.
func GroupHash(k abi.GroupKey) uint32 {
	return ExactHash(abi.ExactKey{Proto: k.Proto, Family: k.Family, Port: uint16(k.Plen) | uint16(k.Pad)<<8, Addr: k.Addr})
}

// buildGroups fills a group table with every bind group (Groups),
// tables[i] being in slots[i]. What it cannot hold it leaves to the trie, so
// that every answer is still the trie's: a family with more prefix lengths
// than the program probes, a group with more ranges than it scans (flagged),
// a group that finds no slot within GroupProbes of its home (its probes are
// full, which sends its packets to the trie), and, when the ranges run out,
// the whole family.
func buildGroups(groups []Group, tables []*table.Table, slots []int) *abi.GroupTable {
	gt := groupTables.Get().(*abi.GroupTable)
	*gt = abi.GroupTable{}
	gt.Ready = 1
	for i, t := range tables {
		gt.State[slots[i]&(len(gt.State)-1)] = table.FlowHashState(t.HashKey)
	}
	fam := func(p netip.Prefix) int {
		if p.Addr().Is6() {
			return 1
		}
		return 0
	}
	var lens [2][]int
	for _, g := range groups {
		f := fam(g.Prefix)
		if !slices.Contains(lens[f], g.Prefix.Bits()) {
			lens[f] = append(lens[f], g.Prefix.Bits())
		}
	}
	for f := range lens {
		slices.Sort(lens[f])
		slices.Reverse(lens[f])
		if len(lens[f]) > groupLens {
			gt.Nlens[f] = GroupTrie
			continue
		}
		gt.Nlens[f] = uint8(len(lens[f]))
		for i, l := range lens[f] {
			gt.Lens[f][i] = groupLen(l)
		}
	}
	next := 0
	used := func(e *abi.GroupEntry) bool { return e.Count != 0 }
	home := func(e *abi.GroupEntry) uint32 { return GroupHash(e.Key) }
	for _, g := range groups {
		f := fam(g.Prefix)
		if gt.Nlens[f] == GroupTrie || len(g.Ranges) == 0 {
			continue
		}
		k := abi.GroupKey{Proto: uint8(g.Proto), Plen: uint8(g.Prefix.Bits())}
		k.Family, k.Addr = PutAddr(g.Prefix.Addr())
		e := abi.GroupEntry{Key: k, First: uint16(next), Count: uint8(min(len(g.Ranges), 255))}
		// The widest range goes in the entry, with its table's hash
		// state: most packets of the group are answered from one line.
		rs := slices.Clone(g.Ranges)
		sort.SliceStable(rs, func(i, j int) bool { return int(rs[i].Hi)-int(rs[i].Lo) > int(rs[j].Hi)-int(rs[j].Lo) })
		e.Range0 = abi.PortRange{Lo: rs[0].Lo, Hi: rs[0].Hi, Slot: uint32(slots[rs[0].Table])}
		e.State = table.FlowHashState(tables[rs[0].Table].HashKey)
		if len(rs) > groupScan {
			e.Trie = 1
		} else if next+len(rs)-1 > groupRanges {
			gt.Nlens[f] = GroupTrie
			continue
		} else {
			for _, r := range rs[1:] {
				gt.R[next] = abi.PortRange{Lo: r.Lo, Hi: r.Hi, Slot: uint32(slots[r.Table])}
				next++
			}
		}
		// A group that does not fit is left to the trie: its probes are
		// all full, which sends its packets there.
		PlaceRH(gt.E[:], used, home, GroupHash(k), e, int(GroupProbes))
	}
	return gt
}

// groupLen is a prefix length with its address mask, word by word in
// network order as the program ANDs them.
func groupLen(bits int) abi.GroupLen {
	l := abi.GroupLen{Plen: uint8(bits)}
	for i := range l.Mask {
		var m uint32
		if b := min(bits-32*i, 32); b > 0 {
			m = ^uint32(0) << (32 - b)
		}
		var w [4]byte
		binary.BigEndian.PutUint32(w[:], m)
		l.Mask[i] = binary.LittleEndian.Uint32(w[:]) // the bytes as the program loads them
	}
	return l
}

// PutAddr is an address as the datapath's keys hold it: a family and 16
// bytes, IPv4 in the first 4.
func PutAddr(a netip.Addr) (fam uint8, b [16]byte) {
	if a.Is4() {
		v := a.As4()
		copy(b[:], v[:])
		return abi.FamilyIPv4, b
	}
	return abi.FamilyIPv6, a.As16()
}

// TrieEntry is one entry of a generation's bind trie.
type TrieEntry struct {
	Key abi.BindKey
	Val abi.BindVal
}

// Binds is a generation's bind maps, laid out: the trie's entries (every
// bind that is not one address and one port, and one entry per live
// slot, the registry), the exact table and the group table.
type Binds struct {
	Trie   []TrieEntry
	Exact  *abi.ExactTable
	Groups *abi.GroupTable
}

// Lay lays out the binds of tables, tables[i] being in slots[i]; spell
// says whether prefix and port-range binds are spelled out into the exact
// table while it has room (ExactPoints). Release gives its tables back.
func Lay(tables []*table.Table, slots []int, spell bool) *Binds {
	refs := table.Refs(tables)
	entries := Compile(refs)
	groups := Groups(refs)
	b := &Binds{}
	for _, e := range entries {
		if !e.Exact {
			k, v := trieEntry(e, slots)
			b.Trie = append(b.Trie, TrieEntry{k, v})
		}
	}
	for _, s := range slots {
		k := abi.BindKey{Prefixlen: 8 + 8, Kind: abi.BindTable}
		k.Data[0] = uint8(s)
		b.Trie = append(b.Trie, TrieEntry{k, abi.BindVal{Id: uint32(s)}})
	}
	b.Exact, _ = buildExact(ExactPoints(refs, entries, groups, spell), tables, slots)
	b.Groups = buildGroups(groups, tables, slots)
	return b
}

// Release gives b's exact and group tables back, once they are written.
func (b *Binds) Release() {
	exactTables.Put(b.Exact)
	groupTables.Put(b.Groups)
	b.Exact, b.Groups = nil, nil
}

func trieEntry(e Entry, slots []int) (abi.BindKey, abi.BindVal) {
	var k abi.BindKey
	if !e.IsPort {
		k.Kind = abi.BindAddr
		k.Prefixlen = 24 + uint32(e.Prefix.Bits())
		fam, addr := PutAddr(e.Prefix.Addr())
		k.Data[0] = uint8(e.Proto)
		k.Data[1] = fam
		copy(k.Data[2:], addr[:])
		return k, abi.BindVal{Id: uint32(e.Group)}
	}
	k.Kind = abi.BindPort
	k.Prefixlen = 8 + 32 + uint32(e.PortBits)
	k.Data[0], k.Data[1], k.Data[2], k.Data[3] = byte(e.Group>>24), byte(e.Group>>16), byte(e.Group>>8), byte(e.Group)
	k.Data[4], k.Data[5] = byte(e.Port>>8), byte(e.Port)
	return k, abi.BindVal{Id: uint32(slots[e.Table])}
}
