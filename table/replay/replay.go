// Package replay aggregates what happened to every packet of a capture
// into the report `director replay` prints: verdicts and pass reasons,
// traffic and flows per table and backend, the hottest rows, and with a
// second config, what a change would do to the flows actually seen.
package replay

import (
	"net/netip"
	"sort"
	"strconv"
)

// Count is packets and bytes.
type Count struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

func (c *Count) add(bytes int) {
	c.Packets++
	c.Bytes += uint64(bytes)
}

// FlowKey is a 5-tuple as seen from the client.
type FlowKey struct {
	Client     netip.Addr
	VIP        netip.Addr
	ClientPort uint16
	VIPPort    uint16
	Proto      uint8
}

// Sample is one packet's fate.
type Sample struct {
	N       int // position in the capture, from 1
	Bytes   int
	TX      bool
	Reason  int  // pass reason, when not TX: an index in the reason names
	HasFlow bool // the packet parsed to a flow (it reached the bind lookup)
	Flow    FlowKey
	Table   int // the table that matched, or -1
	Row     int
	Primary netip.Addr // for TX
	Hops    []netip.Addr
}

// Report is `replay`'s document (README, "replay --json").
type Report struct {
	Version   int              `json:"version"`
	Capture   CaptureInfo      `json:"capture"`
	Verdicts  map[string]Count `json:"verdicts"`
	Reasons   map[string]Count `json:"pass_reasons"`
	Tables    []TableReport    `json:"tables"`
	Unmatched UnmatchedReport  `json:"unmatched"`
	HotRows   []RowReport      `json:"hot_rows"`
	Against   *AgainstReport   `json:"against,omitempty"`
	Verify    *VerifyReport    `json:"verify,omitempty"`
}

// CaptureInfo describes the input.
type CaptureInfo struct {
	File      string `json:"file"`
	Format    string `json:"format"`
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
	Truncated uint64 `json:"truncated"` // packets cut short by the capture's snap length
}

// TableReport is one table's share of the traffic.
type TableReport struct {
	Name     string          `json:"name"`
	Index    int             `json:"index"`
	Count                    // packets and bytes steered
	Flows    uint64          `json:"flows"`
	Backends []BackendReport `json:"backends"`
}

// BackendReport is what one backend was sent as primary.
type BackendReport struct {
	IP    string `json:"ip"`
	Count        // packets and bytes
	Flows uint64 `json:"flows"`
}

// UnmatchedReport is parsed traffic no bind matched.
type UnmatchedReport struct {
	Count
	Flows uint64 `json:"flows"`
}

// RowReport is one of the busiest rows.
type RowReport struct {
	Table   string `json:"table"`
	Row     int    `json:"row"`
	Primary string `json:"primary"`
	Count
}

// AgainstReport is where the capture's flows go under another config.
type AgainstReport struct {
	File  string `json:"file"`
	Flows uint64 `json:"flows"` // flows steered under the current config
	// Unchanged flows keep their primary.
	Unchanged FlowCount `json:"unchanged"`
	// Survive: the primary changes, but the current primary is still one
	// of the new hops, so established connections continue through second
	// chance.
	Survive FlowCount `json:"survive"`
	// Break: the current primary is in none of the new hops.
	Break FlowCount `json:"break"`
	// NotSteered: flows the new config no longer steers.
	NotSteered FlowCount `json:"not_steered"`
	// PrimaryChanged is Survive + Break + NotSteered.
	PrimaryChanged FlowCount `json:"primary_changed"`
	// NewlySteered: flows only the new config steers.
	NewlySteered FlowCount `json:"newly_steered"`
}

// FlowCount is flows weighted three ways.
type FlowCount struct {
	Flows   uint64 `json:"flows"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

func (f *FlowCount) add(o FlowCount) {
	f.Flows += o.Flows
	f.Packets += o.Packets
	f.Bytes += o.Bytes
}

// VerifyReport compares the kernel with the model.
type VerifyReport struct {
	Compared   uint64     `json:"compared"`
	Mismatches uint64     `json:"mismatches"`
	First      []Mismatch `json:"first_mismatches"`
}

// Mismatch is one packet the kernel and the model disagree on.
type Mismatch struct {
	N           int    `json:"packet"`
	Input       string `json:"input"`
	Kernel      string `json:"kernel"`
	Model       string `json:"model"`
	KernelTX    bool   `json:"kernel_tx"`
	ModelTX     bool   `json:"model_tx"`
	Description string `json:"description"`
}

// Aggregator builds a Report from samples. It does one map operation per
// packet (its flow); everything else is counted in arrays or derived from
// the flows at the end.
type Aggregator struct {
	r       Report
	names   []string
	reasons []string // pass reason names, by index
	verdict [2]Count // pass, tx
	reason  []Count
	tables  map[int]*tableAgg
	flows   map[FlowKey]*flowAgg
}

type tableAgg struct {
	count    Count
	backends map[netip.Addr]*Count
	rows     []rowAgg // Rows entries, allocated on first use
}

type rowAgg struct {
	count   Count
	primary netip.Addr
}

type flowAgg struct {
	packets, bytes uint64
	unmatched      bool
	// Under the current config, from the flow's first packet.
	seenOld bool
	oldTX   bool
	table   int
	old     []netip.Addr // hops
	// Under --against.
	seenNew bool
	newTX   bool
	new     []netip.Addr
}

// NewAggregator starts a report; names are the tables' names, in order,
// and reasons the names of pass reasons, by index.
func NewAggregator(file, format string, names, reasons []string) *Aggregator {
	return &Aggregator{reasons: reasons, reason: make([]Count, len(reasons)),
		r: Report{Version: 1, Capture: CaptureInfo{File: file, Format: format},
			Verdicts: map[string]Count{}, Reasons: map[string]Count{}, HotRows: []RowReport{}, Tables: []TableReport{}},
		names: names, tables: map[int]*tableAgg{}, flows: map[FlowKey]*flowAgg{},
	}
}

// Packets is how many packets have been counted so far.
// (Verdicts and reasons are kept in arrays and named in Report.)
func (a *Aggregator) Packets() uint64 { return a.r.Capture.Packets }

// Captured counts a packet read from the capture.
func (a *Aggregator) Captured(bytes int, truncated bool) {
	a.r.Capture.Packets++
	a.r.Capture.Bytes += uint64(bytes)
	if truncated {
		a.r.Capture.Truncated++
	}
}

// Add accounts one packet under the current config.
func (a *Aggregator) Add(s Sample) {
	if s.TX {
		a.verdict[1].add(s.Bytes)
	} else {
		a.verdict[0].add(s.Bytes)
		if s.Reason >= 0 && s.Reason < len(a.reason) {
			a.reason[s.Reason].add(s.Bytes)
		}
	}
	unmatched := s.HasFlow && !s.TX && s.Reason >= 0 && s.Reason < len(a.reasons) && a.reasons[s.Reason] == "pass_no_bind"
	if unmatched {
		a.r.Unmatched.add(s.Bytes)
	}
	if s.TX && s.Table >= 0 {
		t := a.tables[s.Table]
		if t == nil {
			t = &tableAgg{backends: map[netip.Addr]*Count{}, rows: make([]rowAgg, 1<<16)}
			a.tables[s.Table] = t
		}
		t.count.add(s.Bytes)
		b := t.backends[s.Primary]
		if b == nil {
			b = &Count{}
			t.backends[s.Primary] = b
		}
		b.add(s.Bytes)
		row := &t.rows[s.Row&0xffff]
		row.count.add(s.Bytes)
		row.primary = s.Primary
	}
	if s.HasFlow {
		f := a.flow(s.Flow)
		f.packets++
		f.bytes += uint64(s.Bytes)
		f.unmatched = f.unmatched || unmatched
		if !f.seenOld {
			f.seenOld = true
			f.oldTX = s.TX && s.Table >= 0
			f.table = s.Table
			f.old = s.Hops
		}
	}
}

// AddAgainst accounts the same packet under the other config.
func (a *Aggregator) AddAgainst(s Sample) {
	if !s.HasFlow {
		return
	}
	f := a.flow(s.Flow)
	if !f.seenNew {
		f.seenNew = true
		f.newTX = s.TX
		f.new = s.Hops
	}
}

func (a *Aggregator) flow(k FlowKey) *flowAgg {
	f := a.flows[k]
	if f == nil {
		f = &flowAgg{table: -1}
		a.flows[k] = f
	}
	return f
}

func (a *Aggregator) name(i int) string {
	if i >= 0 && i < len(a.names) && a.names[i] != "" {
		return a.names[i]
	}
	return "tables[" + strconv.Itoa(i) + "]"
}

// SetVerify attaches the kernel/model comparison.
func (a *Aggregator) SetVerify(v *VerifyReport) { a.r.Verify = v }

// Report finishes the report. hotRows is how many rows to list; against is
// the other config's file name, or "" without one.
func (a *Aggregator) Report(hotRows int, against string) *Report {
	r := a.r
	r.Verdicts = map[string]Count{}
	for i, name := range []string{"pass", "tx"} {
		if a.verdict[i].Packets > 0 {
			r.Verdicts[name] = a.verdict[i]
		}
	}
	r.Reasons = map[string]Count{}
	for i, c := range a.reason {
		if c.Packets > 0 {
			r.Reasons[a.reasons[i]] = c
		}
	}
	// Distinct flows per table and backend, from each flow's first packet.
	tableFlows := map[int]uint64{}
	backendFlows := map[int]map[netip.Addr]uint64{}
	for _, f := range a.flows {
		if f.unmatched {
			r.Unmatched.Flows++
		}
		if !f.oldTX || len(f.old) == 0 {
			continue
		}
		tableFlows[f.table]++
		if backendFlows[f.table] == nil {
			backendFlows[f.table] = map[netip.Addr]uint64{}
		}
		backendFlows[f.table][f.old[0]]++
	}
	var idx []int
	for i := range a.tables {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		t := a.tables[i]
		tr := TableReport{Name: a.name(i), Index: i, Count: t.count, Flows: tableFlows[i], Backends: []BackendReport{}}
		var ips []netip.Addr
		for ip := range t.backends {
			ips = append(ips, ip)
		}
		sort.Slice(ips, func(x, y int) bool { return ips[x].Less(ips[y]) })
		for _, ip := range ips {
			tr.Backends = append(tr.Backends, BackendReport{IP: ip.String(), Count: *t.backends[ip], Flows: backendFlows[i][ip]})
		}
		r.Tables = append(r.Tables, tr)
		for row := range t.rows {
			if t.rows[row].count.Packets > 0 {
				r.HotRows = append(r.HotRows, RowReport{Table: a.name(i), Row: row, Primary: t.rows[row].primary.String(), Count: t.rows[row].count})
			}
		}
	}
	sort.Slice(r.HotRows, func(i, j int) bool {
		x, y := r.HotRows[i], r.HotRows[j]
		if x.Packets != y.Packets {
			return x.Packets > y.Packets
		}
		if x.Table != y.Table {
			return x.Table < y.Table
		}
		return x.Row < y.Row
	})
	if len(r.HotRows) > hotRows {
		r.HotRows = r.HotRows[:hotRows]
	}
	if against != "" {
		ar := &AgainstReport{File: against}
		for _, f := range a.flows {
			fc := FlowCount{Flows: 1, Packets: f.packets, Bytes: f.bytes}
			switch {
			case !f.oldTX && f.newTX:
				ar.NewlySteered.add(fc)
				continue
			case !f.oldTX:
				continue
			}
			ar.Flows++
			switch {
			case !f.newTX:
				ar.NotSteered.add(fc)
				ar.PrimaryChanged.add(fc)
			case f.old[0] == f.new[0]:
				ar.Unchanged.add(fc)
			case contains(f.new, f.old[0]):
				ar.Survive.add(fc)
				ar.PrimaryChanged.add(fc)
			default:
				ar.Break.add(fc)
				ar.PrimaryChanged.add(fc)
			}
		}
		r.Against = ar
	}
	return &r
}

func contains(hops []netip.Addr, a netip.Addr) bool {
	for _, h := range hops {
		if h == a {
			return true
		}
	}
	return false
}
