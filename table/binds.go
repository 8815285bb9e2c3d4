package table

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
)

// BindRef is one bind of one table, for bind resolution across tables.
type BindRef struct {
	Table int // index of the table in the list given
	Bind  Bind
}

// ResolveBind returns which table a packet to dst:port over proto belongs
// to: among the binds that match, the one with the longest prefix. The
// config forbids two binds of different tables with the same prefix,
// protocol and overlapping ports, so the answer is unique. For ICMP echo
// (echo true) ports and protocol do not count: the most specific bind
// covering dst wins, the first listed among equals. It is the definition
// the datapath's compiled bind trie is tested against.
func ResolveBind(refs []BindRef, dst netip.Addr, proto Proto, port uint16, echo bool) (table int, ok bool) {
	best := -1
	for i, r := range refs {
		b := r.Bind
		if echo {
			if b.Prefix.Addr().Is4() != dst.Is4() || !b.Prefix.Masked().Contains(dst) {
				continue
			}
		} else if !b.Matches(dst, proto, port) {
			continue
		}
		if best < 0 || b.Prefix.Bits() > refs[best].Bind.Prefix.Bits() {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	return refs[best].Table, true
}

// BindEntry is one entry of the datapath's two-stage bind lookup:
//
//	address stage: (proto, address prefix)  -> group
//	port stage:    (group, port prefix)      -> table
//
// Both stages are longest-prefix matches, so lookup cost does not depend on
// how many binds there are. A group carries the effective port map of its
// address prefix: its own binds' ports, and where those leave gaps, the
// ports of less specific prefixes that contain it.
type BindEntry struct {
	Group int
	// Address stage (Port stage fields zero).
	Proto  Proto // ProtoICMP / ProtoICMPv6 for echo entries
	Prefix netip.Prefix
	// Exact entries are a cache of the two stages for binds to one address
	// and one port: Proto, Prefix (full length), Port and Table are set.
	Exact bool
	// Port stage.
	IsPort   bool
	Port     uint16 // first port of the aligned block
	PortBits int    // prefix length of the block, 0-16
	Table    int
}

// Protocol numbers under which echo requests are looked up.
const (
	ProtoICMP   Proto = 1
	ProtoICMPv6 Proto = 58
)

// CompileBinds turns every table's binds into the entries of the two-stage
// lookup. It is deterministic: the same binds give the same entries.
func CompileBinds(refs []BindRef) []BindEntry {
	type key = groupKey
	keys := groupKeys(refs)

	var out []BindEntry
	exact := map[key]map[uint16]bool{}
	addExact := func(proto Proto, p netip.Prefix, port uint16, t int) {
		k := key{proto, p}
		if exact[k] == nil {
			exact[k] = map[uint16]bool{}
		}
		if !exact[k][port] { // the first listed wins, as in ResolveBind
			exact[k][port] = true
			out = append(out, BindEntry{Exact: true, Proto: proto, Prefix: p, Port: port, Table: t})
		}
	}
	for _, r := range refs {
		p := r.Bind.Prefix.Masked()
		if p.Bits() != p.Addr().BitLen() {
			continue
		}
		if r.Bind.PortStart == r.Bind.PortEnd {
			addExact(r.Bind.Proto, p, r.Bind.PortStart, r.Table)
		}
		echo := ProtoICMP
		if p.Addr().Is6() {
			echo = ProtoICMPv6
		}
		addExact(echo, p, 0, r.Table)
	}
	for g, grp := range groups(refs, keys) {
		out = append(out, BindEntry{Group: g, Proto: grp.Proto, Prefix: grp.Prefix})
		for _, r := range grp.Ranges {
			for _, blk := range portBlocks(r.Lo, r.Hi) {
				out = append(out, BindEntry{Group: g, IsPort: true, Port: blk.start, PortBits: blk.bits, Table: r.Table})
			}
		}
	}
	return out
}

// BindGroup is one (protocol, address prefix) of the bind lookup with its
// effective port map: disjoint port ranges in order, each with its table.
// A packet's bind is found in the group of the longest prefix holding its
// destination (for its protocol), then the range holding its port; none
// there means no bind, whatever shorter prefixes hold.
type BindGroup struct {
	Proto  Proto
	Prefix netip.Prefix // masked
	Ranges []PortRange
}

// PortRange is ports Lo to Hi, inclusive, of table Table.
type PortRange struct {
	Lo, Hi uint16
	Table  int
}

// CompileGroups is the groups of CompileBinds, each with its port ranges
// whole rather than in aligned blocks: what the datapath's group table
// holds. Same order as CompileBinds's groups.
func CompileGroups(refs []BindRef) []BindGroup {
	return groups(refs, groupKeys(refs))
}

type groupKey struct {
	proto  Proto
	prefix netip.Prefix
}

// groupKeys lists every (protocol, prefix) that binds and their echo
// lookups need, in a fixed order.
func groupKeys(refs []BindRef) []groupKey {
	var keys []groupKey
	seen := map[groupKey]bool{}
	add := func(k groupKey) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, r := range refs {
		p := r.Bind.Prefix.Masked()
		add(groupKey{r.Bind.Proto, p})
		echo := ProtoICMP
		if p.Addr().Is6() {
			echo = ProtoICMPv6
		}
		add(groupKey{echo, p})
	}
	sort.SliceStable(keys, func(i, j int) bool {
		if keys[i].proto != keys[j].proto {
			return keys[i].proto < keys[j].proto
		}
		if c := keys[i].prefix.Addr().Compare(keys[j].prefix.Addr()); c != 0 {
			return c < 0
		}
		return keys[i].prefix.Bits() < keys[j].prefix.Bits()
	})
	return keys
}

func groups(refs []BindRef, keys []groupKey) []BindGroup {
	cov := newCoverIndex(refs)
	out := make([]BindGroup, 0, len(keys))
	for _, k := range keys {
		g := BindGroup{Proto: k.proto, Prefix: k.prefix}
		cover := cov.covering(k.prefix)
		if k.proto == ProtoICMP || k.proto == ProtoICMPv6 {
			// Echo: the table of the most specific bind covering the
			// whole prefix, the first listed among equals.
			best := -1
			for _, i := range cover {
				if best < 0 || refs[i].Bind.Prefix.Bits() > refs[best].Bind.Prefix.Bits() {
					best = i
				}
			}
			if best >= 0 {
				g.Ranges = []PortRange{{0, 65535, refs[best].Table}}
			}
		} else {
			g.Ranges = effectivePorts(refs, cover, k.proto)
		}
		out = append(out, g)
	}
	return out
}

// coverIndex finds the binds whose prefixes hold a given prefix without
// looking at every bind: by the masked prefix, at each length binds use. A
// config at the limits (8,192 binds) would otherwise take seconds.
type coverIndex struct {
	at   map[netip.Prefix][]int // masked bind prefix: its binds, in listing order
	lens [2][]int               // the prefix lengths binds use, IPv4's and IPv6's
}

func newCoverIndex(refs []BindRef) *coverIndex {
	c := &coverIndex{at: map[netip.Prefix][]int{}}
	for i, r := range refs {
		p := r.Bind.Prefix.Masked()
		f := 0
		if p.Addr().Is6() {
			f = 1
		}
		if !slices.Contains(c.lens[f], p.Bits()) {
			c.lens[f] = append(c.lens[f], p.Bits())
		}
		c.at[p] = append(c.at[p], i)
	}
	return c
}

// covering returns the indices of the binds whose prefixes contain p (of
// p's family, no longer than p), in listing order.
func (c *coverIndex) covering(p netip.Prefix) []int {
	f := 0
	if p.Addr().Is6() {
		f = 1
	}
	var out []int
	for _, l := range c.lens[f] {
		if l <= p.Bits() {
			q, _ := p.Addr().Prefix(l)
			out = append(out, c.at[q]...)
		}
	}
	slices.Sort(out)
	return out
}

// effectivePorts overlays the port ranges of the binds of proto among
// cover (those whose prefixes contain the group's, in listing order),
// least specific first, so more specific binds win.
func effectivePorts(refs []BindRef, cover []int, proto Proto) []PortRange {
	var rs []BindRef
	for _, i := range cover {
		if refs[i].Bind.Proto == proto {
			rs = append(rs, refs[i])
		}
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Bind.Prefix.Bits() < rs[j].Bind.Prefix.Bits() })
	// owner[port] would be 64K entries; ranges are few, so paint intervals.
	var cur []PortRange
	for _, r := range rs {
		cur = paint(cur, PortRange{r.Bind.PortStart, r.Bind.PortEnd, r.Table})
	}
	return cur
}

// paint lays r over a sorted list of disjoint ranges.
func paint(rs []PortRange, r PortRange) []PortRange {
	var out []PortRange
	for _, x := range rs {
		if x.Hi < r.Lo || x.Lo > r.Hi {
			out = append(out, x)
			continue
		}
		if x.Lo < r.Lo {
			out = append(out, PortRange{x.Lo, r.Lo - 1, x.Table})
		}
		if x.Hi > r.Hi {
			out = append(out, PortRange{r.Hi + 1, x.Hi, x.Table})
		}
	}
	out = append(out, r)
	sort.Slice(out, func(i, j int) bool { return out[i].Lo < out[j].Lo })
	return out
}

type portBlock struct {
	start uint16
	bits  int
}

// portBlocks splits [lo, hi] into the fewest aligned power-of-two blocks
// (at most 30), as CIDR does for address ranges.
func portBlocks(lo, hi uint16) []portBlock {
	var out []portBlock
	l, h := uint32(lo), uint32(hi)
	for l <= h {
		size := uint32(1)
		for size < 65536 && l%(size*2) == 0 && l+size*2-1 <= h {
			size *= 2
		}
		bits := 16
		for s := size; s > 1; s /= 2 {
			bits--
		}
		out = append(out, portBlock{uint16(l), bits})
		l += size
	}
	return out
}

// CheckBindOverlaps reports binds of different tables that claim the same
// packets: same protocol and prefix, overlapping ports. (Different prefixes
// are fine: the longer one wins.)
func CheckBindOverlaps(c *Config) ErrorList {
	binds := make([][]Bind, len(c.Tables))
	for i := range c.Tables {
		binds[i] = c.Tables[i].Binds
	}
	return CheckBindOverlapsAt(binds, nil)
}

// maxOverlaps stops the overlap check: a config with this many is refused
// whatever the rest holds, and hostile input should not cost more.
const maxOverlaps = 1000

// CheckBindOverlapsAt is CheckBindOverlaps over each table's binds. Binds are
// grouped by protocol and prefix, and each group is swept in port order,
// so a bind is compared only with the binds of its own prefix whose ranges
// are still open: 256 tables of 256 binds cost a sort, not billions of
// comparisons.
// index[t][b], when given, is where bind b of table t stood in its file,
// for the error paths: binds that did not parse are not in tables.
func CheckBindOverlapsAt(tables [][]Bind, index [][]int) ErrorList {
	type at struct{ t, b int }
	type group struct {
		proto  Proto
		prefix netip.Prefix
	}
	groups := map[group][]at{}
	for ti, bs := range tables {
		for bi, b := range bs {
			g := group{b.Proto, b.Prefix.Masked()}
			groups[g] = append(groups[g], at{ti, bi})
		}
	}
	bind := func(x at) Bind { return tables[x.t][x.b] }
	type pair struct{ later, earlier at }
	var pairs []pair
	for _, members := range groups {
		if len(members) < 2 {
			continue
		}
		sort.Slice(members, func(i, j int) bool { return bind(members[i]).PortStart < bind(members[j]).PortStart })
		var open []at // earlier binds whose range reaches the current start
		for _, x := range members {
			bx := bind(x)
			kept := open[:0]
			for _, y := range open {
				if bind(y).PortEnd >= bx.PortStart {
					kept = append(kept, y)
				}
			}
			open = kept
			for _, y := range open {
				if y.t == x.t {
					continue
				}
				p := pair{x, y}
				if y.t > x.t || (y.t == x.t && y.b > x.b) {
					p = pair{y, x}
				}
				pairs = append(pairs, p)
			}
			if len(pairs) >= maxOverlaps {
				break
			}
			open = append(open, x)
		}
	}
	less := func(a, b at) bool { return a.t < b.t || (a.t == b.t && a.b < b.b) }
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].later != pairs[j].later {
			return less(pairs[i].later, pairs[j].later)
		}
		return less(pairs[i].earlier, pairs[j].earlier)
	})
	var errs ErrorList
	place := func(x at) int {
		if x.t < len(index) && x.b < len(index[x.t]) {
			return index[x.t][x.b]
		}
		return x.b
	}
	for _, p := range pairs {
		x, y := p.later, p.earlier
		errs = append(errs, &FieldError{
			Path: fmt.Sprintf("tables[%d].binds[%d]", x.t, place(x)),
			Msg:  fmt.Sprintf("%s overlaps tables[%d].binds[%d] (%s): a packet could belong to either table", bind(x), y.t, place(y), bind(y)),
		})
	}
	return errs
}

// Refs lists every bind of tables with the index of its table: what the
// bind compiler and resolver take.
func Refs(tables []*Table) []BindRef {
	var refs []BindRef
	for i, t := range tables {
		for _, b := range t.Binds {
			refs = append(refs, BindRef{Table: i, Bind: b})
		}
	}
	return refs
}
