// The warnings a diff carries: about a table on its own, and about what a
// change strands of QUIC connections routed by connection ID.

package table

import (
	"fmt"
	"net/netip"
)

// quicOf is t's QUIC-LB routing for a diff, nil for none.
func quicOf(t *Table) *QUIC {
	if !t.QUIC.On() {
		return nil
	}
	q := t.QUIC
	return &q
}

// quicStranded says what of a change from o to n strands QUIC connections
// routed by connection ID: each such connection's ID names the backend
// that holds it, so whatever makes an ID name another backend, or none
// while a row names another, loses the connection. Turning routing on is
// not among them (the servers issue the IDs before: docs/operations.md).
func quicStranded(o, n *Table) []string {
	var out []string
	switch {
	case o.QUIC.On() && !n.QUIC.On():
		out = append(out, "QUIC-LB routing turned off: a QUIC connection whose row names another backend than the one its connection ID names is lost")
	case o.QUIC.On() && o.QUIC.String() == n.QUIC.String() && o.QUIC.Key != n.QUIC.Key:
		// Both encrypted, alike but for the key, which is never shown.
		out = append(out, "QUIC-LB key changed: connection IDs encrypted with the old key no longer name their backend")
	case o.QUIC.On() && o.QUIC != n.QUIC:
		out = append(out, fmt.Sprintf("QUIC-LB settings changed (%s -> %s): connection IDs issued under the old ones no longer name their backend", o.QUIC, n.QUIC))
	}
	if !o.QUIC.On() || !n.QUIC.On() {
		return out
	}
	nb := byIP(n)
	owner := map[ServerID]netip.Addr{}
	for _, b := range o.Backends {
		owner[b.ServerID] = b.IP
		if x, ok := nb[b.IP]; ok && x.ServerID != b.ServerID {
			out = append(out, fmt.Sprintf("backend %s's server ID changed (%s -> %s): its QUIC connections, which use IDs with %s, are stranded",
				b.IP, b.ServerID, x.ServerID, b.ServerID))
		}
	}
	for _, b := range n.Backends {
		if ip, ok := owner[b.ServerID]; ok && ip != b.IP {
			out = append(out, fmt.Sprintf("server ID %s moves from %s to %s: %s's QUIC connections would be sent to %s", b.ServerID, ip, b.IP, ip, b.IP))
		}
	}
	return out
}

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
