package loader

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

// TestPlace decides where an apply puts tables, without the kernel: an
// unchanged table stays, a changed one moves to a slot neither generation
// uses and keeps its counters, a new one gets a free counter block, and
// backends keep their counter index by address.
func TestPlace(t *testing.T) {
	tabs := testTables(t, testConfig) // web, dns, special, v6
	live := []mapimage.LiveTable{
		{Slot: 0, Index: 0, StatsID: 5, Table: tabs[0], Stat: []uint8{0, 1, 2, 3, 4, 5}},
		{Slot: 3, Index: 1, StatsID: 0, Table: tabs[1], Stat: []uint8{3, 2, 1, 0}},
	}
	previous := []int{1, 2} // the inactive generation's
	// dns changes: its first backend goes, another comes.
	old := tabs[1]
	dns := &table.Table{Name: old.Name, HashKey: old.HashKey, Binds: old.Binds, Rows: old.Rows,
		Backends: append([]table.Backend{{IP: netip.MustParseAddr("192.168.20.9"), State: table.StateActive, Healthy: true}}, old.Backends[1:]...)}
	next := []*table.Table{tabs[0], dns, tabs[2]}
	got, err := mapimage.Place(live, previous, next, nil)
	if err != nil {
		t.Fatal(err)
	}
	// web is unchanged: same slot, not written, same counters.
	if p := got[0]; p.Write || p.Slot != 0 || p.StatsID != 5 || p.Old != &live[0] || string(p.Stat) != string([]uint8{0, 1, 2, 3, 4, 5}) {
		t.Errorf("web: %+v", p)
	}
	// dns changed: a fresh slot (not 0-3), its counter block, and its
	// surviving backends' indices; the new backend takes the free one.
	if p := got[1]; !p.Write || p.Slot != 4 || p.StatsID != 0 || p.Old != &live[1] || string(p.Stat) != string([]uint8{3, 2, 1, 0}) {
		t.Errorf("dns: %+v", p)
	}
	// special is new: the next fresh slot and the first free block.
	if p := got[2]; !p.Write || p.Slot != 5 || p.StatsID != 1 || p.Old != nil {
		t.Errorf("special: %+v", p)
	}
	// Tables matched by name keep their counters when they move in order.
	got, err = mapimage.Place(live, previous, []*table.Table{tabs[1], tabs[0]}, nil)
	if err != nil || got[0].StatsID != 0 || got[1].StatsID != 5 || !got[0].Write || !got[1].Write {
		t.Errorf("reordered: %+v %v", got, err)
	}
	// No slot left.
	var all []int
	for s := 0; s < abi.MaxSlots; s++ {
		all = append(all, s)
	}
	if _, err := mapimage.Place(nil, all, next, nil); err == nil || !strings.Contains(err.Error(), "no free table slot") {
		t.Errorf("with every slot taken: %v", err)
	}
}
