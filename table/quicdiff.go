// What a change does to QUIC connections routed by connection ID: the
// configs it adds, removes or alters, and what it strands of them.

package table

import (
	"fmt"
	"net/netip"
	"time"
)

// quicOf is t's QUIC-LB routing for a diff, nil for none.
func quicOf(t *Table) *QUIC {
	if !t.QUIC.On() {
		return nil
	}
	q := t.QUIC
	return &q
}

// QUICConfigChange is a QUIC-LB config a change adds, removes or alters
// (TableDiff.QUICConfigs). For one removed from a live table, Recent is how
// many packets carried its IDs within Window, measured as the change was
// judged (Base.QUICUse); absent where that is not known.
type QUICConfigChange struct {
	ConfigID uint8   `json:"config_id"`
	Change   string  `json:"change"` // "added", "removed" or "changed"
	Recent   *uint64 `json:"recent_packets,omitempty"`
	WindowS  float64 `json:"window_s,omitempty"`
}

// QUICUse is what a live table's config carried (Base.QUICUse): Packets
// within Window, and Total since its counters began.
type QUICUse struct {
	Packets, Total uint64
	Window         time.Duration
}

// QUICUseKey names a live table's config: its index in Base.Tables and its
// config ID.
type QUICUseKey struct {
	Table  int
	Config uint8
}

// quicStranded says what of a change from o to n strands QUIC connections
// routed by connection ID, and which configs it adds, removes or alters:
// each such connection's ID names the backend that holds it, so whatever
// makes an ID name another backend, or none while a row names another,
// loses the connection. A config removed strands the connections that
// still use it: judged where the change is judged against what is live
// (judgeQUICRemovals), not here. Turning routing on, or adding a config, is
// not among them (the servers issue the IDs after: docs/operations.md).
func quicStranded(o, n *Table) (out []string, changes []QUICConfigChange) {
	if o.QUIC.On() && !n.QUIC.On() {
		return []string{"QUIC-LB routing turned off: a QUIC connection whose row names another backend than the one its connection ID names is lost"}, nil
	}
	if !o.QUIC.On() || !n.QUIC.On() {
		return nil, nil
	}
	multi := len(o.QUIC.Configs()) > 1 || len(n.QUIC.Configs()) > 1
	nb := byIP(n)
	for oci, oc := range o.QUIC.Configs() {
		nc, nci, ok := n.QUIC.Config(oc.ConfigID)
		if !ok {
			changes = append(changes, QUICConfigChange{ConfigID: oc.ConfigID, Change: "removed"})
			continue
		}
		what := "QUIC-LB"
		if multi {
			what = fmt.Sprintf("QUIC config %d", oc.ConfigID)
		}
		if nc != oc {
			changes = append(changes, QUICConfigChange{ConfigID: oc.ConfigID, Change: "changed"})
			if oc.String() == nc.String() {
				// Both encrypted, alike but for the key, which is never shown.
				out = append(out, what+" key changed: connection IDs encrypted with the old key no longer name their backend")
			} else {
				out = append(out, fmt.Sprintf("%s settings changed (%s -> %s): connection IDs issued under the old ones no longer name their backend", what, oc, nc))
			}
			continue
		}
		in := ""
		if multi {
			in = fmt.Sprintf(" in config %d", oc.ConfigID)
		}
		owner := map[ServerID]netip.Addr{}
		for _, b := range o.Backends {
			sid := b.ServerIDIn(oci)
			owner[sid] = b.IP
			if x, ok := nb[b.IP]; ok && x.ServerIDIn(nci) != sid {
				out = append(out, fmt.Sprintf("backend %s's server ID%s changed (%s -> %s): its QUIC connections, which use IDs with %s, are stranded",
					b.IP, in, sid, x.ServerIDIn(nci), sid))
			}
		}
		for _, b := range n.Backends {
			if ip, ok := owner[b.ServerIDIn(nci)]; ok && ip != b.IP {
				out = append(out, fmt.Sprintf("server ID %s%s moves from %s to %s: %s's QUIC connections would be sent to %s", b.ServerIDIn(nci), in, ip, b.IP, ip, b.IP))
			}
		}
	}
	for _, nc := range n.QUIC.Configs() {
		if _, _, ok := o.QUIC.Config(nc.ConfigID); !ok {
			changes = append(changes, QUICConfigChange{ConfigID: nc.ConfigID, Change: "added"})
		}
	}
	return out, changes
}

// judgeQUICRemovals judges the configs td removes from live table i by
// what they carried (use): one that carried packets within its window, or
// whose use is not known, strands the connections on it.
func judgeQUICRemovals(td *TableDiff, i int, use map[QUICUseKey]QUICUse) {
	for k := range td.QUICConfigs {
		c := &td.QUICConfigs[k]
		if c.Change != "removed" {
			continue
		}
		u, ok := use[QUICUseKey{Table: i, Config: c.ConfigID}]
		var s string
		switch {
		case !ok:
			s = fmt.Sprintf("QUIC config %d removed, and whether its IDs are still in use is not known (no counters of a live table): its connections would be stranded", c.ConfigID)
		case u.Packets > 0:
			s = fmt.Sprintf("QUIC config %d removed while in use: %d packets carried its IDs in the last %s; its connections would be stranded (remove it once its counter stops)", c.ConfigID, u.Packets, u.Window)
		}
		if ok {
			n := u.Packets
			c.Recent, c.WindowS = &n, u.Window.Seconds()
		}
		if s != "" {
			td.QUICStranded = append(td.QUICStranded, s)
			td.Warnings = append(td.Warnings, s)
		}
	}
}

// counterpart is the index in new of old[i]'s table: the one of its name
// where every table has one (byName), else the one in its place; -1 for
// none.
func counterpart(old, new []*Table, i int, byName bool) int {
	j := -1
	if byName {
		for k, n := range new {
			if n.Name == old[i].Name {
				j = k
			}
		}
	} else if i < len(new) {
		j = i
	}
	return j
}

// QUICRemovals are the QUIC-LB configs of old's tables that new removes
// from a table it keeps (by index in old, and config ID), as CompareAt
// pairs them: what Base.QUICUse must say for the removals to be judged.
func QUICRemovals(old, new []*Table) []QUICUseKey {
	var out []QUICUseKey
	byName := allNamed(old) && allNamed(new)
	for i, o := range old {
		j := counterpart(old, new, i, byName)
		if j < 0 || !o.QUIC.On() || !new[j].QUIC.On() {
			continue // a table removed, or its routing turned off, is unsafe whatever it carries
		}
		for _, c := range o.QUIC.Configs() {
			if _, _, ok := new[j].QUIC.Config(c.ConfigID); !ok {
				out = append(out, QUICUseKey{Table: i, Config: c.ConfigID})
			}
		}
	}
	return out
}
