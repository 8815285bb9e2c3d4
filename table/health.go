package table

import "net/netip"

// Replaced is the table of live that a config's table i replaces: the one
// of its name, or, unnamed, the unnamed one at its position; nil if none.
// It is how a config's backends find the health the live tables hold.
func Replaced(live []*Table, tc *TableConfig, i int) *Table {
	for k, t := range live {
		if (tc.Name != "" && t.Name == tc.Name) || (tc.Name == "" && t.Name == "" && k == i) {
			return t
		}
	}
	return nil
}

// HealthOf is a backend's health in t, and whether t has it at all.
func HealthOf(t *Table, ip netip.Addr) (healthy, ok bool) {
	if t == nil {
		return false, false
	}
	for _, b := range t.Backends {
		if b.IP == ip {
			return b.Healthy, true
		}
	}
	return false, false
}

// Transition is the table a health change from live to target goes
// through when applying target at once would put rows at risk: target's
// rows, but where a row's live primary is in neither of target's hops, the
// live primary as its secondary, so that its connections carry on through
// second chance while the new primary takes the row's new ones (the first
// half of a drain). From it, target moves no row's primary, so it is a
// change with no row at risk. A live primary target has not, or holds
// unhealthy (its connections go with it), is not kept. It returns nil when
// no row needs it. Its rows are not what any config builds, so it has no
// Digest.
func Transition(live, target *Table) *Table {
	if live == nil || target == nil || len(live.Rows) != len(target.Rows) {
		return nil
	}
	idx := make([]int32, len(live.Backends)) // live's backend index -> target's, -1 none
	at := map[netip.Addr]int32{}
	for k, b := range target.Backends {
		if b.Healthy {
			at[b.IP] = int32(k)
		}
	}
	for k, b := range live.Backends {
		idx[k] = -1
		if j, ok := at[b.IP]; ok {
			idx[k] = j
		}
	}
	var rows []Row
	for r, lr := range live.Rows {
		tr := target.Rows[r]
		j := idx[lr.Primary]
		if j < 0 || uint32(j) == tr.Primary || uint32(j) == tr.Secondary {
			continue
		}
		if rows == nil {
			rows = append([]Row(nil), target.Rows...)
		}
		rows[r].Secondary = uint32(j)
	}
	if rows == nil {
		return nil
	}
	return &Table{Name: target.Name, HashKey: target.HashKey, Binds: target.Binds, Backends: target.Backends, Rows: rows,
		NoGoodRows: target.NoGoodRows, Balance: target.Balance, QUIC: target.QUIC}
}
