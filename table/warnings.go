// The warnings a diff carries about a table on its own.

package table

import (
	"fmt"
)

// TableWarnings are the safety warnings about a table on its own.
func TableWarnings(t *Table) []string {
	var w []string
	var bad []string
	for _, b := range t.Backends {
		if b.State != StateActive || !b.Healthy {
			if b.State == StateInactive {
				continue
			}
			bad = append(bad, b.IP.String())
		}
	}
	if len(bad) > 1 {
		w = append(w, fmt.Sprintf("%d backends are not active and healthy (%v); GLB's safety rule allows at most one at a time", len(bad), bad))
	}
	if bs := BalanceOf(t); bs != nil && bs.OverCap > 0 {
		w = append(w, fmt.Sprintf("%d backends are primary for more rows than their balance cap: their rows' secondaries are at their caps too (too few backends for a factor this close to 1)", bs.OverCap))
	}
	if t.NoGoodRows > 0 {
		w = append(w, fmt.Sprintf("%d rows have no active or filling healthy backend as primary: new connections there go to a backend that may be down", t.NoGoodRows))
	}
	return w
}
