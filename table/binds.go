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
	best, ok := MatchingBind(refs, dst, proto, port, echo)
	if !ok {
		return 0, false
	}
	return refs[best].Table, true
}

// MatchingBind is the bind ResolveBind's answer comes from: its index in
// refs.
func MatchingBind(refs []BindRef, dst netip.Addr, proto Proto, port uint16, echo bool) (int, bool) {
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
	return best, best >= 0
}

// Protocol numbers under which echo requests are looked up.
const (
	ProtoICMP   Proto = 1
	ProtoICMPv6 Proto = 58
)

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
// are still open: 1,024 tables of 256 binds cost a sort, not billions of
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
