package table

import (
	"fmt"
	"net/netip"
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

type portRange struct {
	lo, hi uint16
	table  int
}

// CompileBinds turns every table's binds into the entries of the two-stage
// lookup. It is deterministic: the same binds give the same entries.
func CompileBinds(refs []BindRef) []BindEntry {
	type key struct {
		proto  Proto
		prefix netip.Prefix
	}
	var keys []key
	seen := map[key]bool{}
	add := func(k key) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, r := range refs {
		p := r.Bind.Prefix.Masked()
		add(key{r.Bind.Proto, p})
		echo := ProtoICMP
		if p.Addr().Is6() {
			echo = ProtoICMPv6
		}
		add(key{echo, p})
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
	for g, k := range keys {
		out = append(out, BindEntry{Group: g, Proto: k.proto, Prefix: k.prefix})
		var ranges []portRange
		if k.proto == ProtoICMP || k.proto == ProtoICMPv6 {
			// Echo: the table of the most specific bind covering the
			// whole prefix, the first listed among equals.
			best := -1
			for i, r := range refs {
				b := r.Bind
				if b.Prefix.Addr().Is4() == k.prefix.Addr().Is4() && b.Prefix.Bits() <= k.prefix.Bits() &&
					b.Prefix.Masked().Contains(k.prefix.Addr()) && (best < 0 || b.Prefix.Bits() > refs[best].Bind.Prefix.Bits()) {
					best = i
				}
			}
			if best >= 0 {
				ranges = []portRange{{0, 65535, refs[best].Table}}
			}
		} else {
			ranges = effectivePorts(refs, k.proto, k.prefix)
		}
		for _, r := range ranges {
			for _, blk := range portBlocks(r.lo, r.hi) {
				out = append(out, BindEntry{Group: g, IsPort: true, Port: blk.start, PortBits: blk.bits, Table: r.table})
			}
		}
	}
	return out
}

// effectivePorts overlays the port ranges of every bind whose prefix
// contains p, least specific first, so more specific binds win.
func effectivePorts(refs []BindRef, proto Proto, p netip.Prefix) []portRange {
	var cover []BindRef
	for _, r := range refs {
		b := r.Bind
		if b.Proto == proto && b.Prefix.Addr().Is4() == p.Addr().Is4() &&
			b.Prefix.Bits() <= p.Bits() && b.Prefix.Masked().Contains(p.Addr()) {
			cover = append(cover, r)
		}
	}
	sort.SliceStable(cover, func(i, j int) bool { return cover[i].Bind.Prefix.Bits() < cover[j].Bind.Prefix.Bits() })
	// owner[port] would be 64K entries; ranges are few, so paint intervals.
	var cur []portRange
	for _, r := range cover {
		cur = paint(cur, portRange{r.Bind.PortStart, r.Bind.PortEnd, r.Table})
	}
	return cur
}

// paint lays r over a sorted list of disjoint ranges.
func paint(rs []portRange, r portRange) []portRange {
	var out []portRange
	for _, x := range rs {
		if x.hi < r.lo || x.lo > r.hi {
			out = append(out, x)
			continue
		}
		if x.lo < r.lo {
			out = append(out, portRange{x.lo, r.lo - 1, x.table})
		}
		if x.hi > r.hi {
			out = append(out, portRange{r.hi + 1, x.hi, x.table})
		}
	}
	out = append(out, r)
	sort.Slice(out, func(i, j int) bool { return out[i].lo < out[j].lo })
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
	return checkBindOverlaps(binds)
}

// maxOverlaps stops the overlap check: a config with this many is refused
// whatever the rest holds, and hostile input should not cost more.
const maxOverlaps = 1000

// checkBindOverlaps is CheckBindOverlaps over each table's binds. Binds are
// grouped by protocol and prefix, and each group is swept in port order,
// so a bind is compared only with the binds of its own prefix whose ranges
// are still open: 256 tables of 256 binds cost a sort, not billions of
// comparisons.
func checkBindOverlaps(tables [][]Bind) ErrorList {
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
	for _, p := range pairs {
		x, y := p.later, p.earlier
		errs = append(errs, &FieldError{
			Path: fmt.Sprintf("tables[%d].binds[%d]", x.t, x.b),
			Msg:  fmt.Sprintf("%s overlaps tables[%d].binds[%d] (%s): a packet could belong to either table", bind(x), y.t, y.b, bind(y)),
		})
	}
	return errs
}
