package table

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestBindOverlapCheckIsNotQuadratic: tables of 256 binds on one prefix,
// with ranges that all overlap, are refused at once: 256 tables in a
// second, MaxTables in eight (twice in proportion: the race detector on
// a busy CI host took 1.5 s), where comparing every pair of 262,144
// binds would take hours.
func TestBindOverlapCheckIsNotQuadratic(t *testing.T) {
	t.Parallel()
	pfx := mustPrefix("10.0.0.0/24")
	overlapping := func(n int) [][]Bind {
		tables := make([][]Bind, n)
		for i := range tables {
			for j := 0; j < 256; j++ {
				tables[i] = append(tables[i], Bind{Prefix: pfx, Proto: ProtoTCP, PortStart: uint16(j), PortEnd: 65535})
			}
		}
		return tables
	}
	var errs ErrorList
	for _, c := range []struct {
		n     int
		bound time.Duration
	}{{256, time.Second}, {MaxTables, time.Duration(2*MaxTables/256) * time.Second}} {
		tables := overlapping(c.n)
		start := time.Now()
		errs = CheckBindOverlapsAt(tables, nil)
		if took := time.Since(start); took > c.bound {
			t.Errorf("%d tables: took %v", c.n, took)
		}
	}
	if len(errs) < maxOverlaps {
		t.Errorf("%d overlaps reported", len(errs))
	}
	// Binds of one table may overlap; different prefixes never clash.
	same := [][]Bind{{{Prefix: pfx, Proto: ProtoTCP, PortStart: 1, PortEnd: 100}, {Prefix: pfx, Proto: ProtoTCP, PortStart: 50, PortEnd: 60}},
		{{Prefix: mustPrefix("10.0.0.0/25"), Proto: ProtoTCP, PortStart: 1, PortEnd: 100}, {Prefix: pfx, Proto: ProtoUDP, PortStart: 1, PortEnd: 100},
			{Prefix: pfx, Proto: ProtoTCP, PortStart: 101, PortEnd: 200}, {Prefix: pfx, Proto: ProtoTCP, PortStart: 60, PortEnd: 60}}}
	errs = CheckBindOverlapsAt(same, nil)
	if len(errs) != 2 || errs[0].Path != "tables[1].binds[3]" || !strings.Contains(errs[0].Msg, "tables[0].binds[0]") ||
		!strings.Contains(errs[1].Msg, "tables[0].binds[1]") {
		t.Errorf("overlaps: %v", errs)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestUnservableNamesTheMixedFamily: a table of IPv4 and IPv6 backends is
// refused at the first backend of the other family, saying why; an
// all-IPv6 table is served (GUE over IPv6), as is an all-IPv4 one.
func TestUnservableNamesTheMixedFamily(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	mixed := &Table{Backends: []Backend{{IP: a("10.0.0.1")}, {IP: a("10.0.0.2")}, {IP: a("fd00::3")}, {IP: a("fd00::4")}}}
	v6 := &Table{Backends: []Backend{{IP: a("fd00::1")}, {IP: a("fd00::2")}}}
	v4 := &Table{Backends: []Backend{{IP: a("10.0.0.1")}}}
	errs := Unservable([]*Table{v4, mixed, v6})
	want := []string{
		`tables[1].backends[2].ip: "fd00::3" is IPv6, and tables[1].backends[0] is IPv4: a table's backends are one family, since its GUE packets carry one family of hops`,
	}
	if len(errs) != len(want) {
		t.Fatalf("%d errors: %v", len(errs), errs)
	}
	for i, e := range errs {
		if e.Error() != want[i] {
			t.Errorf("error %d: %s\nwant      %s", i, e, want[i])
		}
	}
}
