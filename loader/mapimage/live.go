package mapimage

import "github.com/director/director/table"

// LiveTable is a table as the kernel holds it.
type LiveTable struct {
	Slot    int
	Index   int // position in the config it was applied from
	StatsID int
	Table   *table.Table
	// Stat is each backend's counter index (position in Table.Backends).
	Stat []uint8
	// History is the slot's record of its rows' earlier primaries, nil
	// for none.
	History *table.History
}
