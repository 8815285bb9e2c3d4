// What the datapath can serve, checked before anything is built or written.

package loader

import (
	"fmt"
	"slices"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/table"
)

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
			if _, err := encodeQUIC(up, stat); err != nil {
				errs = append(errs, &table.FieldError{Path: fmt.Sprintf("tables[%d]", i), Msg: err.Error() + " (checked with every backend healthy: the datapath must hold them when all are up)"})
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// checkSources reports a table whose backends' family the director config
// has no outbound source for.
func checkSources(tables []*table.Table, c *table.DirectorConfig) error {
	if c == nil {
		return nil // nothing is steered until a config is live
	}
	var errs table.ErrorList
	for i, t := range tables {
		if len(t.Backends) == 0 {
			continue
		}
		named := ""
		if t.Name != "" {
			named = fmt.Sprintf(" (%q)", t.Name)
		}
		switch v6 := !t.Backends[0].IP.Is4(); {
		case v6 && !c.SrcIP6.IsValid():
			errs = append(errs, &table.FieldError{Path: fmt.Sprintf("tables[%d]", i),
				Msg: "its backends are IPv6, and the director config has no outbound_src_ip6 to send GUE over IPv6 from" + named})
		case !v6 && !c.SrcIP.IsValid():
			errs = append(errs, &table.FieldError{Path: fmt.Sprintf("tables[%d]", i),
				Msg: "its backends are IPv4, and the director config has no outbound_src_ip to send GUE from" + named})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
