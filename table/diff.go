package table

import (
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Diff is what changes between two sets of tables: the review an operator
// reads before applying. Its JSON form is a documented, stable interface
// (see docs/formats.md, "diff --json").
type Diff struct {
	Version int         `json:"version"` // of this document's schema
	Changed bool        `json:"changed"`
	Tables  []TableDiff `json:"tables"`
}

// DiffVersion is the schema version of Diff's JSON form.
const DiffVersion = 1

// TableDiff compares one table.
type TableDiff struct {
	Name   string `json:"name"` // the table's name, or "tables[i]"
	Status string `json:"status"`
	// OldIndex and NewIndex are positions in each side's table list, -1
	// where the table is absent.
	OldIndex       int             `json:"old_index"`
	NewIndex       int             `json:"new_index"`
	OldFingerprint string          `json:"old_fingerprint,omitempty"`
	NewFingerprint string          `json:"new_fingerprint,omitempty"`
	HashKeyChanged bool            `json:"hash_key_changed"`
	BindsAdded     []string        `json:"binds_added"`
	BindsRemoved   []string        `json:"binds_removed"`
	Backends       []BackendChange `json:"backends"`
	Rows           RowChanges      `json:"rows"`
	// OldDomains and NewDomains are each side's failure domains (Domains),
	// absent where a side has one domain or none.
	OldDomains *DomainStats `json:"old_domains,omitempty"`
	NewDomains *DomainStats `json:"new_domains,omitempty"`
	// OldBalance and NewBalance are each side's balance factor, 0 for
	// none.
	// SameInputs is set where both sides are one config table, unbuilt
	// (UnbuiltTable): unchanged, with no fingerprints, backends or row
	// counts, since neither side was computed.
	SameInputs bool `json:"same_inputs,omitempty"`
	// Brief is set where an unchanged table is given in one line (Brief):
	// its fingerprints, with no backends and only the row total.
	Brief      bool    `json:"brief,omitempty"`
	OldBalance float64 `json:"old_balance_factor,omitempty"`
	NewBalance float64 `json:"new_balance_factor,omitempty"`
	// OldQUIC and NewQUIC are each side's QUIC-LB routing, absent where
	// a side has none; QUICStranded says what of the change strands QUIC
	// connections that are routed by their connection IDs (the verdict
	// counts each).
	// QUICConfigs are the configs added, removed or altered.
	OldQUIC      *QUIC              `json:"old_quic,omitempty"`
	NewQUIC      *QUIC              `json:"new_quic,omitempty"`
	QUICStranded []string           `json:"quic_stranded,omitempty"`
	QUICConfigs  []QUICConfigChange `json:"quic_configs,omitempty"`
	// History is what the new table remembers of its rows' earlier
	// primaries once the change is made (history.go); absent for a
	// table removed.
	History  *HistoryDiff `json:"history,omitempty"`
	Warnings []string     `json:"warnings"`
	// RowsAtRisk marks the rows at risk (RowChanges.AtRisk), for a
	// picture; nil for none, and not in the JSON form.
	RowsAtRisk []bool `json:"-"`
}

// HistoryDiff is a table's history after a change: its settings, the rows
// that remember an earlier primary and those whose packets list one, the
// longest list, the rows at risk only for want of room, and when the last
// entry is forgotten (absent where the diff was made at no particular time:
// two configs compared).
type HistoryDiff struct {
	WindowS  int        `json:"window_s"`
	Hops     bool       `json:"hops"`
	Rows     int        `json:"rows"`
	HopRows  int        `json:"hop_rows"`
	MaxHops  int        `json:"max_hops"`
	Overflow int        `json:"overflow"`
	Until    *time.Time `json:"until,omitempty"`
}

// on reports whether the table lists earlier primaries in its packets:
// then GLB's rule of one drain at a time has no reason left.
func (h *HistoryDiff) on() bool { return h != nil && h.Hops && h.WindowS > 0 }

func historyDiff(set HistorySettings, h *History, risk HistoryRisk, now time.Time) *HistoryDiff {
	hd := &HistoryDiff{WindowS: int(set.Window / time.Second), Hops: !set.NoHops, Overflow: risk.Overflow}
	var until time.Time
	hd.Rows, hd.HopRows, until = h.Summary()
	if !h.Empty() {
		hd.MaxHops = h.MaxHops
		if !now.IsZero() {
			hd.Until = &until
		}
	}
	return hd
}

// Table statuses.
const (
	StatusAdded     = "added"
	StatusRemoved   = "removed"
	StatusChanged   = "changed"
	StatusUnchanged = "unchanged"
)

// RowChanges counts how rows moved.
type RowChanges struct {
	Total            int `json:"total"`
	PrimaryChanged   int `json:"primary_changed"`
	SecondaryChanged int `json:"secondary_changed"`
	// Swapped rows exchanged primary and secondary.
	Swapped int `json:"swapped"`
	// AtRisk rows have a backend that was their primary within the
	// table's window (their primary before the change included), is up,
	// and is in no hop of their new chain (Advance): its established
	// connections there break even with second chance.
	AtRisk int `json:"at_risk"`
	// AtRiskDown rows have such a backend that is down: its connections
	// went with it, whatever the table says. The verdict does not count
	// them.
	AtRiskDown int `json:"at_risk_down"`
	// MinimalPrimaryMoves is the fewest primary changes that reach the new
	// per-backend primary counts: the sum of every backend's gain.
	MinimalPrimaryMoves int  `json:"minimal_primary_moves"`
	Minimal             bool `json:"minimal"`
	// NoGoodRows have no active-or-filling healthy primary in the new table.
	NoGoodRows int `json:"no_good_rows"`
}

// BackendChange is one backend's membership, state and share across the
// change.
type BackendChange struct {
	IP     string `json:"ip"`
	Change string `json:"change"` // added, removed, changed, unchanged
	// Old and New are nil where the backend is absent.
	Old *BackendSide `json:"old"`
	New *BackendSide `json:"new"`
}

// BackendSide is a backend as one side of a diff has it.
type BackendSide struct {
	State         string `json:"state"`
	Healthy       bool   `json:"healthy"`
	Weight        int    `json:"weight"`
	Domain        string `json:"domain,omitempty"`
	ServerID      string `json:"server_id,omitempty"` // its QUIC-LB server ID, hex
	PrimaryRows   int    `json:"primary_rows"`
	SecondaryRows int    `json:"secondary_rows"`
	// Cap is its cap on primary rows where the table has a balance
	// factor (BalanceOf), and AtCap whether it is primary for that many.
	Cap   int  `json:"cap,omitempty"`
	AtCap bool `json:"at_cap,omitempty"`
}

// Backend change kinds.
const (
	ChangeAdded     = "added"
	ChangeRemoved   = "removed"
	ChangeChanged   = "changed"
	ChangeUnchanged = "unchanged"
)

// Compare diffs two sets of tables. Tables pair up by name when every table
// on both sides has one, otherwise by position (GLB binaries carry no
// names). Neither side has a history: what the change itself makes
// (CompareAt).
func Compare(old, new []*Table) *Diff {
	d, _ := CompareAt(Base{Tables: old}, new)
	return d
}

// Base is what a change is judged against: the live tables, their
// histories (nil, or one per table, nil for none), the time the change is
// made at, and, for a table new to the kernel, what the host remembers of
// it from before a restart (Restored, by DisplayName).
type Base struct {
	Tables    []*Table
	Histories []*History
	Now       time.Time
	Restored  map[string]Restored
	// QUICUse is what each live table's QUIC-LB configs carried lately,
	// for judging a config's removal; a removed config absent from it is
	// taken as in use.
	QUICUse map[QUICUseKey]QUICUse
}

// Restored is a table as it was live before the host restarted, and its
// history then: kept outside the kernel (loader.Director.StateDir), and
// checked before it is used.
type Restored struct {
	Table   *Table
	History *History
}

// CompareAt diffs base's live tables with new, as a change made at
// base.Now: rows at risk by the history's rule (Advance), and each new
// table's history after the change, in new's order (nil for none).
func CompareAt(base Base, new []*Table) (*Diff, []*History) {
	old, now := base.Tables, base.Now
	d := &Diff{Version: DiffVersion}
	out := make([]*History, len(new))
	histOf := func(i int) *History {
		if i < len(base.Histories) {
			return base.Histories[i]
		}
		return nil
	}
	byName := allNamed(old) && allNamed(new)
	used := make([]bool, len(new))
	for i, o := range old {
		j := counterpart(old, new, i, byName)
		var n *Table
		if j >= 0 {
			used[j] = true
			n = new[j]
		}
		td, h := compareTable(label(o, n, i, j, byName), i, j, o, n, histOf(i), now)
		judgeQUICRemovals(&td, i, base.QUICUse)
		d.Tables = append(d.Tables, td)
		if j >= 0 {
			out[j] = h
		}
	}
	for j, n := range new {
		if !used[j] {
			name := label(nil, n, -1, j, byName)
			td, h := compareTable(name, -1, j, nil, n, nil, now)
			if r, ok := base.Restored[DisplayName(n.Name, j)]; ok && r.Table != nil {
				// New to the kernel, live before a restart: its
				// connections are still on the backends it had.
				var risk HistoryRisk
				h, risk = Advance(r.History, r.Table, n, now, nil)
				td.Rows.AtRisk, td.Rows.AtRiskDown, td.RowsAtRisk = risk.AtRisk, risk.AtRiskDown, risk.Rows
				td.History = historyDiff(n.History, h, risk, now)
			}
			d.Tables = append(d.Tables, td)
			out[j] = h
		}
	}
	for _, td := range d.Tables {
		if td.Status != StatusUnchanged {
			d.Changed = true
		}
	}
	return d, out
}

// Brief returns d with each unchanged table in one line (TableDiff.Brief):
// its backends, their shares and its row counts left out, which for 32
// tables of 256 backends are most of a plan's bytes and of its output,
// and say nothing a reviewer needs of a table that does not change. d is
// not modified; the verdict is judged on the whole diff before.
func (d *Diff) Brief() *Diff {
	out := *d
	out.Tables = make([]TableDiff, len(d.Tables))
	for i, td := range d.Tables {
		if td.Status == StatusUnchanged && !td.SameInputs {
			td = TableDiff{Name: td.Name, Status: td.Status, OldIndex: td.OldIndex, NewIndex: td.NewIndex,
				OldFingerprint: td.OldFingerprint, NewFingerprint: td.NewFingerprint, Brief: true,
				BindsAdded: []string{}, BindsRemoved: []string{}, Backends: []BackendChange{},
				Rows: RowChanges{Total: td.Rows.Total, Minimal: true}, Warnings: td.Warnings}
		}
		out.Tables[i] = td
	}
	return &out
}

func allNamed(ts []*Table) bool {
	for _, t := range ts {
		if t.Name == "" {
			return false
		}
	}
	return true
}

func label(o, n *Table, i, j int, byName bool) string {
	switch {
	case byName && o != nil:
		return o.Name
	case byName:
		return n.Name
	case n != nil && n.Name != "":
		return n.Name
	case o != nil && o.Name != "":
		return o.Name
	case i >= 0:
		return DisplayName("", i)
	}
	return DisplayName("", j)
}

// counts returns each backend's primary and secondary row counts.
func counts(t *Table) (prim, sec []int) {
	prim = make([]int, len(t.Backends))
	sec = make([]int, len(t.Backends))
	for _, r := range t.Rows {
		prim[r.Primary]++
		sec[r.Secondary]++
	}
	return prim, sec
}

func sides(t *Table) map[netip.Addr]*BackendSide {
	m := map[netip.Addr]*BackendSide{}
	if t == nil {
		return m
	}
	prim, sec := counts(t)
	caps := Caps(t.Backends, t.Balance)
	for i, b := range t.Backends {
		s := &BackendSide{State: b.State.String(), Healthy: b.Healthy, Weight: int(b.W()), Domain: b.Domain, ServerID: t.QUIC.ServerIDsOf(b),
			PrimaryRows: prim[i], SecondaryRows: sec[i]}
		if caps != nil && b.Good() {
			s.Cap, s.AtCap = caps[i], prim[i] >= caps[i]
		}
		m[b.IP] = s
	}
	return m
}

// compareTable compares o (with its history, prev) and n, the change
// made at now, and gives n's history after it.
func compareTable(name string, i, j int, o, n *Table, prev *History, now time.Time) (TableDiff, *History) {
	td := TableDiff{Name: name, OldIndex: i, NewIndex: j, BindsAdded: []string{}, BindsRemoved: []string{}, Warnings: []string{}}
	td.Rows.Total = Rows
	if o != nil && o == n && o.Unbuilt {
		td.Status, td.SameInputs, td.Backends = StatusUnchanged, true, []BackendChange{}
		td.Rows.Minimal = true
		return td, prev
	}
	same := o != nil && n != nil && (o == n || sameTables(o, n))
	if same {
		td = diffOfOne(td, n)
	} else {
		td = compareGeneral(td, o, n)
	}
	if n == nil {
		return td, nil
	}
	if (same || o == nil) && prev.Empty() {
		td.History = historyDiff(n.History, nil, HistoryRisk{}, now) // nothing to remember: no row moved
		return td, nil
	}
	h, risk := Advance(prev, o, n, now, nil)
	td.Rows.AtRisk, td.Rows.AtRiskDown, td.RowsAtRisk = risk.AtRisk, risk.AtRiskDown, risk.Rows
	td.History = historyDiff(n.History, h, risk, now)
	if td.HashKeyChanged && risk.AtRisk > 0 {
		td.Warnings = append(td.Warnings, "hash_key changed: every flow hashes to a new row, so established connections can break")
	}
	if risk.AtRisk > 0 {
		td.Warnings = append(td.Warnings, fmt.Sprintf("%d rows at risk: a backend that was their primary within the window is up and in no hop of their new chain, so its connections break even with second chance", risk.AtRisk))
	}
	return td, h
}

// sameTables reports whether o and n are one table in two copies (a live
// table read back, and the build that wrote it): the same rows (by
// fingerprint, which hashes the key and every row's hops), backends with
// everything about them, binds and balance factor. Fingerprints are
// computed once a table, and built and live tables have theirs already.
func sameTables(o, n *Table) bool {
	if o.Unbuilt || n.Unbuilt || o.HashKey != n.HashKey || o.Balance != n.Balance || o.NoGoodRows != n.NoGoodRows ||
		len(o.Backends) != len(n.Backends) || !slices.Equal(o.Binds, n.Binds) {
		return false
	}
	for i := range o.Backends {
		if !sameBackend(o.Backends[i], n.Backends[i]) {
			return false
		}
	}
	return Fingerprint(o) == Fingerprint(n)
}

// compareGeneral is compareTable of two tables that may differ.
func compareGeneral(td TableDiff, o, n *Table) TableDiff {
	if o != nil {
		td.OldFingerprint = Fingerprint(o)
		td.OldDomains = Domains(o)
		td.OldBalance = float64(o.Balance) / BalanceScale
		td.OldQUIC = quicOf(o)
	}
	if n != nil {
		td.NewFingerprint = Fingerprint(n)
		td.NewDomains = Domains(n)
		td.NewBalance = float64(n.Balance) / BalanceScale
		td.NewQUIC = quicOf(n)
	}

	td.Backends = compareBackends(o, n)

	switch {
	case o == nil:
		td.Status = StatusAdded
	case n == nil:
		td.Status = StatusRemoved
		td.Warnings = append(td.Warnings, "table removed: every flow to its binds stops being steered")
	}
	if o != nil && n != nil {
		compareRows(&td, o, n)
		td.HashKeyChanged = o.HashKey != n.HashKey
		ob, nb := bindSet(o), bindSet(n)
		for _, b := range n.Binds {
			if !ob[b] {
				td.BindsAdded = append(td.BindsAdded, b.String())
			}
		}
		for _, b := range o.Binds {
			if !nb[b] {
				td.BindsRemoved = append(td.BindsRemoved, b.String())
			}
		}
		td.Status = StatusUnchanged
		changedBackends := false
		for _, bc := range td.Backends {
			if bc.Change != ChangeUnchanged {
				changedBackends = true
			}
		}
		if td.OldFingerprint != td.NewFingerprint || td.HashKeyChanged || changedBackends || o.Balance != n.Balance ||
			len(td.BindsAdded)+len(td.BindsRemoved) > 0 || o.QUIC != n.QUIC {
			td.Status = StatusChanged
		}
		td.QUICStranded, td.QUICConfigs = quicStranded(o, n)
		td.Warnings = append(td.Warnings, td.QUICStranded...)
		if len(td.BindsRemoved) > 0 {
			td.Warnings = append(td.Warnings, fmt.Sprintf("%d binds removed: traffic to them stops being steered", len(td.BindsRemoved)))
		}
	}
	if n != nil {
		td.Warnings = append(td.Warnings, TableWarnings(n)...)
	}
	return td
}

// compareBackends lists every backend of either side, the new table's
// order first, with how it changed.
func compareBackends(o, n *Table) []BackendChange {
	var out []BackendChange
	os := sides(o)
	var ns map[netip.Addr]*BackendSide
	if n == o { // one table on both sides: its sides counted once
		ns = make(map[netip.Addr]*BackendSide, len(os))
		for ip, side := range os {
			c := *side
			ns[ip] = &c
		}
	} else {
		ns = sides(n)
	}
	var order []Backend
	if n != nil {
		order = append(order, n.Backends...)
	}
	if o != nil {
		for _, b := range o.Backends {
			if ns[b.IP] == nil {
				order = append(order, b)
			}
		}
	}
	ob, nb := byIP(o), byIP(n)
	for _, b := range order {
		bc := BackendChange{IP: b.IP.String(), Old: os[b.IP], New: ns[b.IP]}
		switch {
		case bc.Old == nil:
			bc.Change = ChangeAdded
		case bc.New == nil:
			bc.Change = ChangeRemoved
		case o != n && !sameSide(o, n, ob[b.IP], nb[b.IP]):
			bc.Change = ChangeChanged
		default:
			bc.Change = ChangeUnchanged
		}
		out = append(out, bc)
	}
	return out
}

// diffOfOne is compareTable of one table on both sides (a live table a
// config did not change, taken as it is): what the general path gives for
// two equal tables (TestSameTableIsTheGeneralPath), without its maps by
// address, which were most of an apply's diff of 32 unchanged tables.
func diffOfOne(td TableDiff, t *Table) TableDiff {
	td.OldFingerprint = Fingerprint(t)
	td.NewFingerprint = td.OldFingerprint
	td.OldDomains, td.NewDomains = Domains(t), Domains(t)
	td.OldBalance = float64(t.Balance) / BalanceScale
	td.NewBalance = td.OldBalance
	td.OldQUIC, td.NewQUIC = quicOf(t), quicOf(t)
	prim, sec := counts(t)
	caps := Caps(t.Backends, t.Balance)
	td.Backends = make([]BackendChange, len(t.Backends))
	sides := make([]BackendSide, 2*len(t.Backends))
	for i, b := range t.Backends {
		s := BackendSide{State: b.State.String(), Healthy: b.Healthy, Weight: int(b.W()), Domain: b.Domain, ServerID: t.QUIC.ServerIDsOf(b),
			PrimaryRows: prim[i], SecondaryRows: sec[i]}
		if caps != nil && b.Good() {
			s.Cap, s.AtCap = caps[i], prim[i] >= caps[i]
		}
		sides[2*i], sides[2*i+1] = s, s
		td.Backends[i] = BackendChange{IP: b.IP.String(), Old: &sides[2*i], New: &sides[2*i+1], Change: ChangeUnchanged}
	}
	td.Rows.NoGoodRows = t.NoGoodRows
	td.Rows.Minimal = true
	td.Status = StatusUnchanged
	td.Warnings = append(td.Warnings, TableWarnings(t)...)
	return td
}

// sameSide reports whether a backend on both sides of a diff is the same:
// state (draining and inactive alike, as a GLB binary cannot tell them
// apart), health, weight, domain and server IDs, in the QUIC-LB configs
// both tables have (a config added or removed is the table's change).
func sameSide(o, n *Table, a, b Backend) bool {
	if !a.State.SameAs(b.State) || a.Healthy != b.Healthy || a.W() != b.W() || a.Domain != b.Domain {
		return false
	}
	for oci, q := range o.QUIC.Configs() {
		if _, nci, ok := n.QUIC.Config(q.ConfigID); ok && a.ServerIDIn(oci) != b.ServerIDIn(nci) {
			return false
		}
	}
	return true
}

// byIP indexes a table's backends by address (nil for no table).
func byIP(t *Table) map[netip.Addr]Backend {
	if t == nil {
		return nil
	}
	m := make(map[netip.Addr]Backend, len(t.Backends))
	for _, b := range t.Backends {
		m[b.IP] = b
	}
	return m
}

func bindSet(t *Table) map[Bind]bool {
	m := map[Bind]bool{}
	for _, b := range t.Binds {
		m[b] = true
	}
	return m
}

func compareRows(td *TableDiff, o, n *Table) {
	rc := &td.Rows
	rc.NoGoodRows = n.NoGoodRows
	if o == n {
		// One table on both sides (a live table a config did not change,
		// taken as it is): no row moved.
		rc.Minimal = true
		return
	}
	for r := range n.Rows {
		op, osec := o.Backends[o.Rows[r].Primary].IP, o.Backends[o.Rows[r].Secondary].IP
		np, nsec := n.Backends[n.Rows[r].Primary].IP, n.Backends[n.Rows[r].Secondary].IP
		if op != np {
			rc.PrimaryChanged++
		}
		if osec != nsec {
			rc.SecondaryChanged++
		}
		if op != np && op == nsec && osec == np {
			rc.Swapped++
		}
	}
	oldPrim := map[netip.Addr]int{}
	for _, bc := range td.Backends {
		if bc.Old != nil {
			oldPrim[netip.MustParseAddr(bc.IP)] = bc.Old.PrimaryRows
		}
	}
	for _, bc := range td.Backends {
		if bc.New != nil {
			if gain := bc.New.PrimaryRows - oldPrim[netip.MustParseAddr(bc.IP)]; gain > 0 {
				rc.MinimalPrimaryMoves += gain
			}
		}
	}
	rc.Minimal = rc.PrimaryChanged == rc.MinimalPrimaryMoves
}
