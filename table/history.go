package table

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/director/director/bpf/abi"
)

// A table's history: for each row, the backends that were its primary
// within the table's window (history_s) and are not its primary now,
// newest first. A connection lives on the backend that was its row's
// primary when it began; while that backend is up and in the row's hop
// list, second chance reaches it whatever changed since. So a change
// breaks a connection only where a backend that was the row's primary
// within the window, and is up, is in no hop of the row's new chain
// (Advance counts those rows), and with the earlier primaries listed in
// the packets (HistorySettings.NoHops unset) that happens only when a
// row had more of them than its hops hold.

// History limits (director.h, enum dir_hist_limit).
const (
	// HistoryHops is how many earlier primaries a row's packets list
	// after its primary and secondary (and the alternate hash's two).
	HistoryHops = 4
	// HistoryRecord is how many a row's record holds: the hops, and room
	// for its secondary and for backends that are down, which are
	// remembered but not listed.
	HistoryRecord = 6
	// HistoryEpochs is how many distinct expiry times a record holds.
	HistoryEpochs = 255
)

const (
	_ = uint(HistoryHops-int(abi.DirHistLimitDIR_HIST_HOPS)) + uint(int(abi.DirHistLimitDIR_HIST_HOPS)-HistoryHops)
	_ = uint(HistoryRecord-int(abi.DirHistLimitDIR_HIST_RECORD)) + uint(int(abi.DirHistLimitDIR_HIST_RECORD)-HistoryRecord)
	_ = uint(HistoryEpochs-int(abi.DirHistLimitDIR_HIST_EPOCHS)) + uint(int(abi.DirHistLimitDIR_HIST_EPOCHS)-HistoryEpochs)
)

// DefaultHistoryWindow is history_s when a config does not give it: ten
// minutes, longer than most HTTP keep-alives and git fetches, short
// enough that a removed backend stops being sent packets soon after, and
// that few rows collect more earlier primaries than their hops hold
// (docs/architecture.md, "History").
const DefaultHistoryWindow = 10 * time.Minute

// MaxHistoryWindow is the longest history_s (it is kept in 16 bits).
const MaxHistoryWindow = 65535 * time.Second

// HistorySettings are a table's history_s and history_hops.
type HistorySettings struct {
	// Window is how long a backend is remembered in a row after it stops
	// being its primary; 0 remembers nothing past the change itself
	// (GLB's verdict).
	Window time.Duration
	// NoHops keeps the earlier primaries out of the packets
	// (history_hops false): GLB's hop lists byte for byte, and the
	// verdict still counts the connections a change strands.
	NoHops bool
}

// DefaultHistory are the settings of a table whose config gives none.
func DefaultHistory() HistorySettings { return HistorySettings{Window: DefaultHistoryWindow} }

// History is a table's record of its rows' earlier primaries.
type History struct {
	// Backends are the backends its entries name, each with whether it
	// is up: the table's health for its own, the last word of the checks
	// for one the table no longer has.
	Backends []HistBackend
	// Expires are the epochs' expiry times, Unix nanoseconds: an entry
	// goes when its epoch expires.
	Expires []int64
	// Rows are each row's entries, newest first; nil when no row has one.
	Rows []HistRow
	// Hops are each row's earlier primaries that its packets list (up,
	// neither its primary nor its secondary), as Backends positions + 1,
	// 0 for none; nil when no row lists any.
	Hops []HistHops
	// MaxHops is the most hops any row lists.
	MaxHops int
}

// HistBackend is a backend a history names.
type HistBackend struct {
	IP netip.Addr
	Up bool
}

// HistRow is a row's record.
type HistRow [HistoryRecord]HistEntry

// HistEntry is one earlier primary: Backend is its position in
// History.Backends + 1 (0: no entry), Epoch the index of its expiry in
// History.Expires.
type HistEntry struct {
	Backend uint16
	Epoch   uint16
}

// HistHops are the earlier primaries a row's packets list.
type HistHops [HistoryHops]uint16

// Empty reports whether h remembers nothing.
func (h *History) Empty() bool { return h == nil || h.Rows == nil }

// RowHops returns the addresses row r's packets list after its primary
// and secondary.
func (h *History) RowHops(r int) []netip.Addr {
	if h == nil || h.Hops == nil {
		return nil
	}
	var out []netip.Addr
	for _, b := range h.Hops[r] {
		if b == 0 {
			break
		}
		out = append(out, h.Backends[b-1].IP)
	}
	return out
}

// RowEntries returns row r's earlier primaries, newest first, with when
// each is forgotten.
func (h *History) RowEntries(r int) []HistoryEntry {
	if h.Empty() {
		return nil
	}
	var out []HistoryEntry
	for _, e := range h.Rows[r] {
		if e.Backend == 0 {
			break
		}
		b := h.Backends[e.Backend-1]
		out = append(out, HistoryEntry{IP: b.IP, Up: b.Up, Until: time.Unix(0, h.Expires[e.Epoch]).UTC()})
	}
	return out
}

// HistoryEntry is an earlier primary of a row, as RowEntries gives it.
type HistoryEntry struct {
	IP    netip.Addr
	Up    bool
	Until time.Time
}

// Summary counts what h holds: rows with an entry, rows whose packets
// list one, and when the last entry expires (zero for none).
func (h *History) Summary() (rows, hopRows int, until time.Time) {
	if h.Empty() {
		return 0, 0, time.Time{}
	}
	for r := range h.Rows {
		if h.Rows[r][0].Backend != 0 {
			rows++
		}
		if h.Hops != nil && h.Hops[r][0] != 0 {
			hopRows++
		}
	}
	var last int64
	for _, e := range h.Expires {
		last = max(last, e)
	}
	return rows, hopRows, time.Unix(0, last).UTC()
}

// Equal reports whether two histories hold the same record and hops.
func (h *History) Equal(o *History) bool {
	if h.Empty() || o.Empty() {
		return h.Empty() == o.Empty()
	}
	return h.MaxHops == o.MaxHops && slices.Equal(h.Backends, o.Backends) && slices.Equal(h.Expires, o.Expires) &&
		slices.Equal(h.Rows, o.Rows) && slices.Equal(h.Hops, o.Hops)
}

// HistoryRisk is what a change does to connections, by the history's
// rule: a row is at risk when a backend that was its primary within the
// window (its primary before the change included), and is up, is in no
// hop of its new chain.
type HistoryRisk struct {
	AtRisk int
	// AtRiskDown rows have an old primary that is down after the change:
	// its connections go with it, and the rule does not count them.
	AtRiskDown int
	// Overflow of the rows at risk are so only because their record or
	// their hops had no room for another earlier primary.
	Overflow int
	// Rows marks the rows at risk; nil when none is.
	Rows []bool
}

// Advance is the history that goes with new when it replaces old (with
// prev, old's history; nil for none) at now: each row's primary before
// the change joins its record (while old is there and the hash key is
// the same), entries past their expiry go, and a row's present primary
// leaves it. It also judges the change by the rule of HistoryRisk. up
// gives the checks' word on a backend new does not have (nil: as prev
// recorded it, or up); new's backends are up when healthy.
//
// Advance is a function of its arguments: directors fed the same changes
// at the same times build the same histories.
func Advance(prev *History, old, new *Table, now time.Time, up func(netip.Addr) (up, known bool)) (*History, HistoryRisk) {
	a := newAdvancer(prev, old, new, now, up)
	set := new.History
	fresh := now.UnixNano() + int64(set.Window)
	hashChanged := old != nil && old.HashKey != new.HashKey
	var common []cand // with a new hash key, every row's candidates
	if hashChanged {
		common = a.allCandidates(prev, old, fresh)
	}
	var risk HistoryRisk
	cands := make([]cand, 0, HistoryRecord+2)
	for r := range new.Rows {
		np, ns := a.newIdx[new.Rows[r].Primary], a.newIdx[new.Rows[r].Secondary]
		cands = cands[:0]
		switch {
		case hashChanged:
			cands = append(cands, common...)
		case old != nil:
			if op := a.oldIdx[old.Rows[r].Primary]; op != np {
				cands = append(cands, cand{op, fresh})
			}
			cands = a.prevCandidates(cands, prev, r)
		default:
			cands = a.prevCandidates(cands, prev, r)
		}
		a.row(r, np, ns, cands, set, &risk)
	}
	return a.finish(), risk
}

// cand is an earlier primary that may go in a row's record: a backend
// (advancer position) and when it expires.
type cand struct {
	b       int
	expires int64
}

// advancer builds a history. Until finish, its rows name backends by
// advancer position + 1 and epochs by position in times.
type advancer struct {
	now     int64
	ips     []netip.Addr // every backend seen, by position
	up      []bool
	byIP    map[netip.Addr]int
	newIdx  []int  // new's backends' positions
	inNew   []bool // by position: whether new has the backend
	prevIdx []int  // prev's backends' positions
	oldIdx  []int  // old's backends' positions
	times   []int64
	timeIdx map[int64]uint16
	rows    []HistRow
	hops    []HistHops
	maxHops int
}

// newAdvancer numbers the backends new, prev and old name, in that
// order, each with its health: new's own, or else the checks' word, or
// else prev's record, or old's health.
func newAdvancer(prev *History, old, new *Table, now time.Time, up func(netip.Addr) (bool, bool)) *advancer {
	a := &advancer{now: now.UnixNano(), byIP: map[netip.Addr]int{}, timeIdx: map[int64]uint16{}}
	health := func(ip netip.Addr, recorded bool) bool {
		if up != nil {
			if u, known := up(ip); known {
				return u
			}
		}
		return recorded
	}
	for _, b := range new.Backends {
		a.newIdx = append(a.newIdx, a.add(b.IP, b.Healthy))
	}
	defer func() {
		a.inNew = make([]bool, len(a.ips))
		for _, i := range a.newIdx {
			a.inNew[i] = true
		}
	}()
	if prev != nil {
		for _, b := range prev.Backends {
			a.prevIdx = append(a.prevIdx, a.add(b.IP, health(b.IP, b.Up)))
		}
	}
	if old != nil {
		for _, b := range old.Backends {
			a.oldIdx = append(a.oldIdx, a.add(b.IP, health(b.IP, b.Healthy)))
		}
	}
	return a
}

// add gives ip a position, the first time with its health.
func (a *advancer) add(ip netip.Addr, up bool) int {
	if i, ok := a.byIP[ip]; ok {
		return i
	}
	a.byIP[ip] = len(a.ips)
	a.ips = append(a.ips, ip)
	a.up = append(a.up, up)
	return len(a.ips) - 1
}

// prevCandidates appends row r's unexpired entries of prev.
func (a *advancer) prevCandidates(c []cand, prev *History, r int) []cand {
	if prev.Empty() {
		return c
	}
	for _, e := range prev.Rows[r] {
		if e.Backend == 0 {
			break
		}
		if exp := prev.Expires[e.Epoch]; exp > a.now {
			c = append(c, cand{a.prevIdx[e.Backend-1], exp})
		}
	}
	return c
}

// allCandidates is every row's old primary and unexpired entries, once
// each with its latest expiry, newest first: where a flow's row is when
// the hash key changes, so is every backend that held a row.
func (a *advancer) allCandidates(prev *History, old *Table, fresh int64) []cand {
	latest := map[int]int64{}
	for r := range old.Rows {
		latest[a.oldIdx[old.Rows[r].Primary]] = fresh
	}
	if !prev.Empty() {
		for r := range prev.Rows {
			for _, c := range a.prevCandidates(nil, prev, r) {
				latest[c.b] = max(latest[c.b], c.expires)
			}
		}
	}
	var out []cand
	for b, e := range latest {
		out = append(out, cand{b, e})
	}
	slices.SortFunc(out, func(x, y cand) int {
		if c := cmp.Compare(y.expires, x.expires); c != 0 {
			return c
		}
		return a.ips[x.b].Compare(a.ips[y.b])
	})
	return out
}

// row settles row r's record and hops from its candidates (newest first)
// and judges it. An earlier primary that is down is forgotten (its
// connections went with it); one that is up stays in the chain, the
// secondary or a hop, for its window, or else is counted at risk and
// forgotten: the change that strands its connections says so once.
//
// A backend the table no longer has (removed within the window) is listed
// after those it has: its health is no longer checked, and last in the
// chain, were it gone, it would lose only its own connections' packets,
// where before another it would lose that one's too.
func (a *advancer) row(r, np, ns int, cands []cand, set HistorySettings, risk *HistoryRisk) {
	slices.SortStableFunc(cands, func(x, y cand) int {
		switch {
		case a.inNew[x.b] == a.inNew[y.b]:
			return cmp.Compare(y.expires, x.expires) // newest first
		case a.inNew[x.b]:
			return -1
		}
		return 1
	})
	var rec [HistoryRecord]int
	var exp [HistoryRecord]int64
	var hops [HistoryHops]int
	nrec, nhops := 0, 0
	atRisk, overflow, down := false, false, false
	for k, c := range cands {
		if c.b == np || dupe(cands[:k], c.b) {
			continue
		}
		if !a.up[c.b] {
			down = true
			continue
		}
		kept := c.expires > a.now // window 0: the change's own old primary only
		inChain := c.b == ns
		if !inChain && kept && !set.NoHops {
			if nhops < HistoryHops {
				hops[nhops] = c.b + 1
				nhops++
				inChain = true
			} else {
				overflow = true
			}
		}
		if !inChain {
			atRisk = true
			continue
		}
		if kept && nrec < HistoryRecord { // at most the hops and the secondary: always room
			rec[nrec], exp[nrec] = c.b, c.expires
			nrec++
		}
	}
	if atRisk {
		if risk.Rows == nil {
			risk.Rows = make([]bool, Rows)
		}
		risk.Rows[r] = true
		risk.AtRisk++
		if overflow {
			risk.Overflow++
		}
	}
	if down {
		risk.AtRiskDown++
	}
	if nrec > 0 {
		if a.rows == nil {
			a.rows = make([]HistRow, Rows)
		}
		for k := range nrec {
			a.rows[r][k] = HistEntry{Backend: uint16(rec[k] + 1), Epoch: a.epoch(exp[k])}
		}
	}
	if nhops > 0 {
		if a.hops == nil {
			a.hops = make([]HistHops, Rows)
		}
		for k := range nhops {
			a.hops[r][k] = uint16(hops[k])
		}
		a.maxHops = max(a.maxHops, nhops)
	}
}

// epoch is t's position in times.
func (a *advancer) epoch(t int64) uint16 {
	if n := len(a.times); n > 0 && a.times[n-1] == t {
		return uint16(n - 1) // most entries are the change's own, or their row's neighbours'
	}
	if i, ok := a.timeIdx[t]; ok {
		return i
	}
	i := uint16(len(a.times))
	a.timeIdx[t] = i
	a.times = append(a.times, t)
	return i
}

func dupe(cs []cand, b int) bool {
	for _, c := range cs {
		if c.b == b {
			return true
		}
	}
	return false
}

// finish numbers the backends and epochs the rows use in a canonical
// order (backends by address, epochs by time) and makes the history.
// Past HistoryEpochs distinct times, the earliest are merged into the
// next later one: an entry is then kept a little longer, never shorter.
func (a *advancer) finish() *History {
	if a.rows == nil {
		return nil
	}
	used := make([]bool, len(a.ips))
	for r := range a.rows {
		for _, e := range a.rows[r] {
			if e.Backend == 0 {
				break
			}
			used[e.Backend-1] = true
		}
	}
	var order []int
	for i, u := range used {
		if u {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(x, y int) int { return a.ips[x].Compare(a.ips[y]) })
	h := &History{MaxHops: a.maxHops, Rows: a.rows, Hops: a.hops}
	pos := make([]uint16, len(a.ips))
	for k, i := range order {
		pos[i] = uint16(k + 1)
		h.Backends = append(h.Backends, HistBackend{IP: a.ips[i], Up: a.up[i]})
	}
	sorted := slices.Clone(a.times)
	slices.Sort(sorted)
	merged := max(len(sorted)-HistoryEpochs, 0) // the earliest this many expire with the one after them
	rank := make(map[int64]uint16, len(sorted))
	for k, t := range sorted {
		rank[t] = uint16(max(k-merged, 0))
	}
	epochOf := make([]uint16, len(a.times))
	for i, t := range a.times {
		epochOf[i] = rank[t]
	}
	h.Expires = sorted[merged:]
	for r := range h.Rows {
		for k, e := range h.Rows[r] {
			if e.Backend == 0 {
				break
			}
			h.Rows[r][k] = HistEntry{Backend: pos[e.Backend-1], Epoch: epochOf[e.Epoch]}
		}
	}
	for r := range h.Hops {
		for k, b := range h.Hops[r] {
			if b == 0 {
				break
			}
			h.Hops[r][k] = pos[b-1]
		}
	}
	return h
}
