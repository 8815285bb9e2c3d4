package loader

import (
	"testing"
	"unsafe"

	"github.com/director/director/bpf/abi"
)

// TestMapMemoryCountsWhatTheTablesHold (issue 49): what MapMemory reads
// is the maps' own accounting, each map once: the total is the sum of the
// maps, a director with no tables holds no table's inner map, and serving
// tables adds an inner map each, at least as large as its rows.
func TestMapMemoryCountsWhatTheTablesHold(t *testing.T) {
	d := loadTest(t)
	before, err := d.MapMemory()
	if err != nil {
		t.Fatal(err)
	}
	check := func(m MapMemory) {
		t.Helper()
		var sum uint64
		names := map[string]bool{}
		for _, u := range m.Maps {
			sum += u.Bytes
			if names[u.Name] {
				t.Errorf("map %s counted twice", u.Name)
			}
			names[u.Name] = true
		}
		if sum != m.Bytes || len(m.Maps) < 10 {
			t.Errorf("%d maps of %d bytes in all; the total says %d", len(m.Maps), sum, m.Bytes)
		}
	}
	check(before)
	if u := before.Of("tables"); u.Inner != 0 {
		t.Errorf("no table live, and the tables map holds %d inner maps", u.Inner)
	}
	dc := directorConfig()
	tabs := testTables(t, testConfig)
	if _, _, err := d.Commit(&Proposal{Tables: tabs, Config: &dc}, nil); err != nil {
		t.Fatal(err)
	}
	after, err := d.MapMemory()
	if err != nil {
		t.Fatal(err)
	}
	check(after)
	tb, tb0 := after.Of("tables"), before.Of("tables")
	rows := uint64(abi.Rows) * uint64(unsafe.Sizeof(abi.DirRow{}))
	if tb.Inner != len(tabs) || tb.Bytes-tb0.Bytes < uint64(len(tabs))*rows {
		t.Errorf("%d tables served: the tables map holds %d inner maps, %d bytes more; a table's rows alone are %d",
			len(tabs), tb.Inner, tb.Bytes-tb0.Bytes, rows)
	}
	if after.Bytes <= before.Bytes {
		t.Errorf("serving %d tables: %d bytes before, %d after", len(tabs), before.Bytes, after.Bytes)
	}
	t.Logf("loaded: %d bytes; %d tables served: %d bytes, the tables map %d in %d inner maps", before.Bytes, len(tabs), after.Bytes, tb.Bytes, tb.Inner)
}
