package mapimage

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/table"
)

// Where an apply puts each table, decided without the kernel: which live
// table it continues (keeping its counters), which counter index each of
// its backends has, and whether it is unchanged (it stays in its slot) or
// must be written into a fresh slot that no packet can be reading.

// Placement is where an apply puts one table.
type Placement struct {
	Old     *LiveTable // the live table it continues, or nil
	Slot    int        // its table slot
	StatsID int        // its counter block
	Stat    []uint8    // each backend's counter index in the block
	Write   bool       // a changed or new table: slot is fresh
}

// Place decides where tables go, given the live tables and the slots the
// inactive bind generation still registers (previous): an unchanged table
// keeps its slot; a changed or new one gets a slot neither generation
// references; a table continuing a live one keeps its counter block and
// each backend's counter index (by address); a new table gets a free
// block.
//
// A table whose history (hists, by table) is not the live one's is
// written again, rows unchanged or not: the two go live together.
func Place(live []LiveTable, previous []int, tables []*table.Table, hists []*table.History) ([]Placement, error) {
	taken := map[int]bool{} // slots either generation references, and this apply's
	statsTaken := map[int]bool{}
	for _, lt := range live {
		taken[lt.Slot] = true
		statsTaken[lt.StatsID] = true
	}
	for _, s := range previous {
		taken[s] = true
	}
	match := matchTables(live, tables)
	out := make([]Placement, len(tables))
	for i, t := range tables {
		p := &out[i]
		p.StatsID, p.Slot = -1, -1
		if j := match[i]; j >= 0 {
			p.Old = &live[j]
			p.StatsID = p.Old.StatsID
		}
		p.Stat = assignStats(p.Old, t)
		var h *table.History
		if i < len(hists) {
			h = hists[i]
		}
		if p.Old != nil && sameTable(p.Old, i, t, p.Stat) && p.Old.History.Equal(h) {
			p.Slot = p.Old.Slot
		} else {
			p.Write = true
		}
	}
	// Counter blocks for new tables: free ones (their counters are zeroed).
	for i := range out {
		if out[i].StatsID >= 0 {
			statsTaken[out[i].StatsID] = true
		}
	}
	for i := range out {
		if out[i].StatsID >= 0 {
			continue
		}
		for id := 0; id < abi.MaxTables && out[i].StatsID < 0; id++ {
			if !statsTaken[id] {
				out[i].StatsID = id
				statsTaken[id] = true
			}
		}
		if out[i].StatsID < 0 {
			return nil, errors.New("no free counter block")
		}
	}
	// Fresh slots: neither generation's, nor taken by this apply.
	for i := range out {
		if !out[i].Write {
			continue
		}
		for s := 0; s < abi.MaxSlots && out[i].Slot < 0; s++ {
			if !taken[s] {
				out[i].Slot = s
				taken[s] = true
			}
		}
		if out[i].Slot < 0 {
			return nil, fmt.Errorf("tables[%d]: no free table slot", i)
		}
	}
	return out, nil
}

// matchTables pairs each new table with a live one: by name when all have
// names, else by position. -1 where there is none.
func matchTables(live []LiveTable, tables []*table.Table) []int {
	match := make([]int, len(tables))
	named := true
	for _, lt := range live {
		named = named && lt.Table.Name != ""
	}
	for _, t := range tables {
		named = named && t.Name != ""
	}
	for i, t := range tables {
		match[i] = -1
		for j, lt := range live {
			if (named && lt.Table.Name == t.Name) || (!named && j == i) {
				match[i] = j
			}
		}
	}
	return match
}

// assignStats keeps each backend's counter index from the live table and
// gives new backends free ones.
func assignStats(old *LiveTable, t *table.Table) []uint8 {
	stat := make([]uint8, len(t.Backends))
	taken := map[uint8]bool{}
	known := map[netip.Addr]uint8{}
	if old != nil {
		for i, b := range old.Table.Backends {
			known[b.IP] = old.Stat[i]
		}
	}
	assigned := make([]bool, len(t.Backends))
	for i, b := range t.Backends {
		if s, ok := known[b.IP]; ok && !taken[s] {
			stat[i], assigned[i], taken[s] = s, true, true
		}
	}
	next := 0
	for i := range t.Backends {
		if assigned[i] {
			continue
		}
		for taken[uint8(next)] {
			next++
		}
		stat[i] = uint8(next)
		taken[uint8(next)] = true
	}
	return stat
}

func sameTable(old *LiveTable, index int, t *table.Table, stat []uint8) bool {
	o := old.Table
	if old.Index != index {
		return false
	}
	// The balance factor and the registry's digest are part of what a
	// slot holds: a table whose rows stay but whose factor changed, or
	// that was built from other inputs, is written again.
	if o.Name != t.Name || o.HashKey != t.HashKey || o.Balance != t.Balance || o.History != t.History || o.Digest != t.Digest ||
		len(o.Backends) != len(t.Backends) || len(o.Binds) != len(t.Binds) {
		return false
	}
	for i := range t.Backends {
		a, b := o.Backends[i], t.Backends[i]
		if a.IP != b.IP || a.State != b.State || a.Healthy != b.Healthy || a.W() != b.W() || a.Domain != b.Domain || old.Stat[i] != stat[i] {
			return false
		}
	}
	for i := range t.Binds {
		if o.Binds[i] != t.Binds[i] {
			return false
		}
	}
	return len(o.Rows) == len(t.Rows) && (len(t.Rows) == 0 || bytes.Equal(rowBytes(o.Rows), rowBytes(t.Rows)))
}

// rowBytes is rows' memory, compared in one memequal (table.Row is two
// uint32s, no padding).
func rowBytes(rows []table.Row) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&rows[0])), len(rows)*int(unsafe.Sizeof(rows[0])))
}
