package table

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// manyTables is a config of n small tables, each with its own bind.
// TestBindOverlapCheckIsNotQuadratic: 256 tables of 256 binds on one
// prefix, with ranges that all overlap, are refused at once.
func TestBindOverlapCheckIsNotQuadratic(t *testing.T) {
	tables := make([][]Bind, 256)
	pfx := mustPrefix("10.0.0.0/24")
	for i := range tables {
		for j := 0; j < 256; j++ {
			tables[i] = append(tables[i], Bind{Prefix: pfx, Proto: ProtoTCP, PortStart: uint16(j), PortEnd: 65535})
		}
	}
	start := time.Now()
	errs := CheckBindOverlapsAt(tables, nil)
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %v", took)
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
