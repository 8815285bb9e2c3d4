package bindmap

import (
	"net/netip"
	"slices"
	"sort"

	"github.com/director/director/table"
)

// Entry is one entry of the datapath's two-stage bind lookup:
//
//	address stage: (proto, address prefix)  -> group
//	port stage:    (group, port prefix)      -> table
//
// Both stages are longest-prefix matches, so lookup cost does not depend on
// how many binds there are. A group carries the effective port map of its
// address prefix: its own binds' ports, and where those leave gaps, the
// ports of less specific prefixes that contain it.
type Entry struct {
	Group int
	// Address stage (Port stage fields zero).
	Proto  table.Proto // table.ProtoICMP or table.ProtoICMPv6 for echo entries
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

// Compile turns every table's binds into the entries of the two-stage
// lookup. It is deterministic: the same binds give the same entries.
func Compile(refs []table.BindRef) []Entry {
	type key = groupKey
	keys := groupKeys(refs)

	var out []Entry
	exact := map[key]map[uint16]bool{}
	addExact := func(proto table.Proto, p netip.Prefix, port uint16, t int) {
		k := key{proto, p}
		if exact[k] == nil {
			exact[k] = map[uint16]bool{}
		}
		if !exact[k][port] { // the first listed wins, as in ResolveBind
			exact[k][port] = true
			out = append(out, Entry{Exact: true, Proto: proto, Prefix: p, Port: port, Table: t})
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
		echo := table.ProtoICMP
		if p.Addr().Is6() {
			echo = table.ProtoICMPv6
		}
		addExact(echo, p, 0, r.Table)
	}
	for g, grp := range groups(refs, keys) {
		out = append(out, Entry{Group: g, Proto: grp.Proto, Prefix: grp.Prefix})
		for _, r := range grp.Ranges {
			for _, blk := range portBlocks(r.Lo, r.Hi) {
				out = append(out, Entry{Group: g, IsPort: true, Port: blk.start, PortBits: blk.bits, Table: r.Table})
			}
		}
	}
	return out
}

// Group is one (protocol, address prefix) of the bind lookup with its
// effective port map: disjoint port ranges in order, each with its table.
// A packet's bind is found in the group of the longest prefix holding its
// destination (for its protocol), then the range holding its port; none
// there means no bind, whatever shorter prefixes hold.
type Group struct {
	Proto  table.Proto
	Prefix netip.Prefix // masked
	Ranges []PortRange
}

// PortRange is ports Lo to Hi, inclusive, of table Table.
type PortRange struct {
	Lo, Hi uint16
	Table  int
}

// Groups is the groups of Compile, each with its port ranges
// whole rather than in aligned blocks: what the datapath's group table
// holds. Same order as Compile's groups.
func Groups(refs []table.BindRef) []Group {
	return groups(refs, groupKeys(refs))
}

type groupKey struct {
	proto  table.Proto
	prefix netip.Prefix
}

// groupKeys lists every (protocol, prefix) that binds and their echo
// lookups need, in a fixed order.
func groupKeys(refs []table.BindRef) []groupKey {
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
		echo := table.ProtoICMP
		if p.Addr().Is6() {
			echo = table.ProtoICMPv6
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

func groups(refs []table.BindRef, keys []groupKey) []Group {
	cov := newCoverIndex(refs)
	out := make([]Group, 0, len(keys))
	for _, k := range keys {
		g := Group{Proto: k.proto, Prefix: k.prefix}
		cover := cov.covering(k.prefix)
		if k.proto == table.ProtoICMP || k.proto == table.ProtoICMPv6 {
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

func newCoverIndex(refs []table.BindRef) *coverIndex {
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
func effectivePorts(refs []table.BindRef, cover []int, proto table.Proto) []PortRange {
	var rs []table.BindRef
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
