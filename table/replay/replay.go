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
	Reason  string // pass reason, when not TX
	HasFlow bool   // the packet parsed to a flow (it reached the bind lookup)
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

// Aggregator builds a Report from samples.
type Aggregator struct {
	r        Report
	names    []string
	tables   map[int]*tableAgg
	unmFlows map[FlowKey]bool
	rows     map[[2]int]*RowReport
	flows    map[FlowKey]*flowAgg // for --against
}

type tableAgg struct {
	count    Count
	flows    map[FlowKey]bool
	backends map[netip.Addr]*backendAgg
}

type backendAgg struct {
	count Count
	flows map[FlowKey]bool
}

type flowAgg struct {
	old, new   []netip.Addr // hops; nil: not steered
	oldTX      bool
	newTX      bool
	packets    uint64
	bytes      uint64
	seenOld    bool
	seenNew    bool
	oldPrimary netip.Addr
}

// NewAggregator starts a report; names are the tables' names, in order.
func NewAggregator(file, format string, names []string) *Aggregator {
	return &Aggregator{
		r: Report{Version: 1, Capture: CaptureInfo{File: file, Format: format},
			Verdicts: map[string]Count{}, Reasons: map[string]Count{}, HotRows: []RowReport{}, Tables: []TableReport{}},
		names: names, tables: map[int]*tableAgg{}, unmFlows: map[FlowKey]bool{}, rows: map[[2]int]*RowReport{},
		flows: map[FlowKey]*flowAgg{},
	}
}

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
	verdict := "pass"
	if s.TX {
		verdict = "tx"
	}
	c := a.r.Verdicts[verdict]
	c.add(s.Bytes)
	a.r.Verdicts[verdict] = c
	if !s.TX {
		rc := a.r.Reasons[s.Reason]
		rc.add(s.Bytes)
		a.r.Reasons[s.Reason] = rc
	}
	if s.HasFlow && !s.TX && s.Reason == "pass_no_bind" {
		a.r.Unmatched.add(s.Bytes)
		a.unmFlows[s.Flow] = true
	}
	if s.TX && s.Table >= 0 {
		t := a.tables[s.Table]
		if t == nil {
			t = &tableAgg{flows: map[FlowKey]bool{}, backends: map[netip.Addr]*backendAgg{}}
			a.tables[s.Table] = t
		}
		t.count.add(s.Bytes)
		t.flows[s.Flow] = true
		b := t.backends[s.Primary]
		if b == nil {
			b = &backendAgg{flows: map[FlowKey]bool{}}
			t.backends[s.Primary] = b
		}
		b.count.add(s.Bytes)
		b.flows[s.Flow] = true
		k := [2]int{s.Table, s.Row}
		row := a.rows[k]
		if row == nil {
			row = &RowReport{Table: a.name(s.Table), Row: s.Row, Primary: s.Primary.String()}
			a.rows[k] = row
		}
		row.add(s.Bytes)
	}
	if s.HasFlow {
		f := a.flow(s.Flow)
		f.packets++
		f.bytes += uint64(s.Bytes)
		if !f.seenOld {
			f.seenOld = true
			f.oldTX = s.TX
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
		f = &flowAgg{}
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
	var idx []int
	for i := range a.tables {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		t := a.tables[i]
		tr := TableReport{Name: a.name(i), Index: i, Count: t.count, Flows: uint64(len(t.flows)), Backends: []BackendReport{}}
		var ips []netip.Addr
		for ip := range t.backends {
			ips = append(ips, ip)
		}
		sort.Slice(ips, func(x, y int) bool { return ips[x].Less(ips[y]) })
		for _, ip := range ips {
			b := t.backends[ip]
			tr.Backends = append(tr.Backends, BackendReport{IP: ip.String(), Count: b.count, Flows: uint64(len(b.flows))})
		}
		r.Tables = append(r.Tables, tr)
	}
	r.Unmatched.Flows = uint64(len(a.unmFlows))
	for _, row := range a.rows {
		r.HotRows = append(r.HotRows, *row)
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
