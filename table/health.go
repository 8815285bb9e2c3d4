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
