package mapimage

import (
	"fmt"
	"slices"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/table"
)

// MaxTables is how many tables can be live at once. An apply writes its
// tables into slots that neither bind generation references, so the slots
// hold the live tables, the previous apply's and the next one's.
const MaxTables = 32

// Limit is how many tables the datapath holds, for the config reader: a
// config with more is refused before anything is built.
var Limit = table.Limit{Tables: MaxTables, Holder: "the datapath holds"}

// CheckDatapath reports what the datapath cannot serve: more tables than
// it has slots for, and a table of both families (table.Unservable).
// Tables of IPv6 backends it serves over IPv6 (encapsulate6).
func CheckDatapath(tables []*table.Table) error {
	var errs table.ErrorList
	if len(tables) > MaxTables {
		errs = append(errs, &table.FieldError{Path: "tables", Msg: fmt.Sprintf("%d tables; %s at most %d", len(tables), Limit.Holder, MaxTables)})
	}
	errs = append(errs, table.Unservable(tables)...)
	// Server IDs the datapath could not find all of (IDs chosen to
	// collide): placement depends on the IDs alone. Checked with every
	// backend up, as the health checks may make them: a table that only
	// fits while some are down would leave the service no health change
	// it could apply.
	stat := make([]uint8, abi.MaxBackends)
	for i := range stat {
		stat[i] = uint8(i)
	}
	for i, t := range tables {
		if t.QUIC.On() && len(t.Backends) <= len(stat) {
			up := &table.Table{QUIC: t.QUIC, Backends: slices.Clone(t.Backends)}
			for k := range up.Backends {
				up.Backends[k].Healthy = true
			}
			if _, err := EncodeQUIC(up, stat); err != nil {
				errs = append(errs, &table.FieldError{Path: fmt.Sprintf("tables[%d]", i), Msg: err.Error() + " (checked with every backend healthy: the datapath must hold them when all are up)"})
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
