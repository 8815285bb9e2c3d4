// Package replay aggregates what happened to every packet of a capture
// into the report `director replay` prints: verdicts and pass reasons,
// traffic and flows per table and backend, the hottest rows, and with a
// second config, what a change would do to the flows actually seen. It
// runs the Go model's pipeline itself (RunModel); the kernel's is
// internal/replay/inkernel, which feeds the same Aggregator.
package replay

import (
	"net/netip"
	"slices"
	"sort"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/classify"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/table"
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
	Verdict int  // the XDP action: model.XDPTX, model.XDPPass, or (from the kernel) another
	Reason  int  // pass reason, for XDP_PASS: an index in the reason names
	HasFlow bool // the packet parsed to a flow (it reached the bind lookup)
	Flow    FlowKey
	// FlowID, when valid, is the flow as a Classifier numbered it: the
	// Aggregator then finds the flow by its number without hashing the
	// key. An Aggregator takes IDs of one Classifier for Add and of one
	// other for AddAgainst (the first it is given), and panics on any
	// other's.
	FlowID  classify.FlowID
	Table   int // the table that matched, or -1
	Row     int
	Primary netip.Addr // for TX
	Hops    []netip.Addr
	// QUIC is, for a UDP packet of a table with QUIC-LB routing, the
	// counter it was counted under (model.Result.QUIC); 0 for any other.
	QUIC int
}

// TX reports whether the packet was sent on (XDP_TX).
func (s *Sample) TX() bool { return s.Verdict == model.XDPTX }

// verdictNames name the XDP actions, as the report's verdicts do.
var verdictNames = [...]string{"aborted", "drop", "pass", "tx", "redirect"}

// FromModel fills s with what the Go model did to the packet at capture
// position n, of bytes bytes, whose flow a Classifier numbered id.
func FromModel(s *Sample, n, bytes int, res *model.Result, id classify.FlowID) {
	*s = Sample{N: n, Bytes: bytes, Verdict: res.Verdict, Table: -1, QUIC: res.QUIC}
	if !s.TX() {
		s.Reason = res.Reason
	}
	if res.Parsed {
		s.HasFlow = true
		s.FlowID = id
		s.Flow = FlowKey{Client: res.Client, VIP: res.VIP, ClientPort: res.ClientPort, VIPPort: res.VIPPort, Proto: res.Proto}
	}
	if s.TX() && res.TooBig != abi.CICMPTooBig {
		s.Hops = res.Hops()
		s.Primary = res.HopList[0]
		s.Table, s.Row = res.Table, res.Row
	}
}

// Report is `replay`'s document (docs/replay.md).
type Report struct {
	Version  int              `json:"version"`
	Capture  CaptureInfo      `json:"capture"`
	Verdicts map[string]Count `json:"verdicts"`
	Reasons  map[string]Count `json:"pass_reasons"`
	// QUIC counts the UDP packets of tables with QUIC-LB routing by the
	// counter they went under: quic_routed (by connection ID), or the
	// fallback's; absent where the config has no such table.
	QUIC      map[string]Count `json:"quic,omitempty"`
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
	// MultiBuffer counts frames longer than the program's first buffer
	// (model.FirstBuffer): multi-buffer XDP frames, as a jumbo MTU or a
	// capture taken after GRO gives.
	MultiBuffer uint64 `json:"multi_buffer"`
	// NotRun counts frames the kernel could not run: over one buffer, on
	// a kernel without multi-buffer XDP, whose BPF_PROG_RUN takes no more
	// (the single-buffer build). Their fate in the report is the model's,
	// and --verify does not compare them.
	NotRun uint64 `json:"not_run"`
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
	Table string `json:"table"`
	Row   int    `json:"row"`
	// Primary is the backend the row's packets were sent to; where they
	// went to several (connection IDs of a table with QUIC-LB routing
	// naming other backends), the one sent most.
	Primary string `json:"primary"`
	Count
	// SentTo, only where the row's packets went to several backends, is
	// what each was sent, the busiest first.
	SentTo []RowBackend `json:"sent_to,omitempty"`
}

// RowBackend is what one backend was sent of a row's packets.
type RowBackend struct {
	IP string `json:"ip"`
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
	N        int    `json:"packet"`
	Input    string `json:"input"`
	Kernel   string `json:"kernel"`
	Model    string `json:"model"`
	KernelTX bool   `json:"kernel_tx"`
	ModelTX  bool   `json:"model_tx"`
	// The verdicts in full: the XDP action, and for XDP_PASS the reason.
	KernelVerdict string `json:"kernel_verdict"`
	ModelVerdict  string `json:"model_verdict"`
	Description   string `json:"description"`
}

// SetVerify attaches the kernel/model comparison.
func (a *Aggregator) SetVerify(v *VerifyReport) { a.r.Verify = v }

// Report finishes the report. hotRows is how many rows to list; against is
// the other config's file name, or "" without one.
func (a *Aggregator) Report(hotRows int, against string) *Report {
	a.normalize()
	r := a.r
	r.Verdicts = map[string]Count{}
	for i, name := range verdictNames {
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
	for i, c := range a.quic {
		if c.Packets > 0 {
			if r.QUIC == nil {
				r.QUIC = map[string]Count{}
			}
			r.QUIC[a.reasons[i]] = c
		}
	}
	flows := a.flowsPerBackend()
	r.Unmatched.Flows += flows.unmatched
	for i, t := range a.tables {
		if t != nil {
			tr, hot := a.tableReport(i, t, flows)
			r.Tables = append(r.Tables, tr)
			r.HotRows = append(r.HotRows, hot...)
		}
	}
	r.HotRows = hottest(r.HotRows, hotRows)
	if against != "" {
		r.Against = a.againstReport(against)
	}
	return &r
}

// flowCounts are distinct flows per table and backend, from each flow's
// first packet, and the flows no bind matched.
type flowCounts struct {
	table     map[int]uint64
	backend   map[int]map[hop]uint64
	unmatched uint64
}

func (a *Aggregator) flowsPerBackend() flowCounts {
	fc := flowCounts{table: map[int]uint64{}, backend: map[int]map[hop]uint64{}}
	for i := 0; i < a.flows.Len(); i++ {
		f := a.flows.At(i)
		if f.unmatched {
			fc.unmatched++
		}
		if !f.oldTX || f.nOld == 0 {
			continue
		}
		ti := int(f.table)
		fc.table[ti]++
		if fc.backend[ti] == nil {
			fc.backend[ti] = map[hop]uint64{}
		}
		fc.backend[ti][f.old[0]]++
	}
	return fc
}

// tableReport is table i's traffic per backend (summed from its rows, each
// packet on the backend it was sent to), and its rows that saw traffic.
func (a *Aggregator) tableReport(i int, t *tableAgg, flows flowCounts) (TableReport, []RowReport) {
	name := table.DisplayName(a.tableName(i), i)
	tr := TableReport{Name: name, Index: i, Count: t.count, Flows: flows.table[i], Backends: []BackendReport{}}
	var rows []RowReport
	backends := map[hop]*Count{}
	credit := func(h hop, c Count) {
		b := backends[h]
		if b == nil {
			b = &Count{}
			backends[h] = b
		}
		b.merge(c)
	}
	others := t.elsewhereByRow()
	for row := range t.rows {
		rc := &t.rows[row]
		if rc.count.Packets == 0 {
			continue
		}
		rr := RowReport{Table: name, Row: row, Primary: rc.primary.addr().String(), Count: rc.count}
		if others[int32(row)] == nil {
			credit(rc.primary, rc.count)
			rows = append(rows, rr)
			continue
		}
		sent := sortedHops(t.sentTo(int32(row), others[int32(row)]))
		rr.Primary = sent[0].hop.addr().String()
		for _, h := range sent {
			credit(h.hop, h.Count)
			if len(sent) > 1 {
				rr.SentTo = append(rr.SentTo, RowBackend{IP: h.hop.addr().String(), Count: h.Count})
			}
		}
		rows = append(rows, rr)
	}
	var ips []hop
	for ip := range backends {
		ips = append(ips, ip)
	}
	sort.Slice(ips, func(x, y int) bool { return ips[x].addr().Less(ips[y].addr()) })
	for _, ip := range ips {
		tr.Backends = append(tr.Backends, BackendReport{IP: ip.addr().String(), Count: *backends[ip], Flows: flows.backend[i][ip]})
	}
	return tr, rows
}

// tableName is table i's name in the config, "" if it has none.
func (a *Aggregator) tableName(i int) string {
	if i >= 0 && i < len(a.names) {
		return a.names[i]
	}
	return ""
}

// hottest is the n busiest rows, busiest first.
func hottest(rows []RowReport, n int) []RowReport {
	sort.Slice(rows, func(i, j int) bool {
		x, y := rows[i], rows[j]
		if x.Packets != y.Packets {
			return x.Packets > y.Packets
		}
		if x.Table != y.Table {
			return x.Table < y.Table
		}
		return x.Row < y.Row
	})
	if len(rows) > n {
		rows = rows[:n]
	}
	if rows == nil {
		rows = []RowReport{}
	}
	return rows
}

// againstReport is what the other config would do to the flows steered
// under this one: each flow judged by its first packet under each.
func (a *Aggregator) againstReport(file string) *AgainstReport {
	ar := &AgainstReport{File: file}
	for i := 0; i < a.flows.Len(); i++ {
		f := a.flows.At(i)
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
		case f.nNew > 0 && f.old[0] == f.new[0]:
			ar.Unchanged.add(fc)
		case slices.Contains(f.new[:f.nNew], f.old[0]):
			ar.Survive.add(fc)
			ar.PrimaryChanged.add(fc)
		default:
			ar.Break.add(fc)
			ar.PrimaryChanged.add(fc)
		}
	}
	return ar
}

// RowPackets is, for each table of the replayed config, the packets each
// of its rows took: what 'replay --picture' draws. Call it after Report.
func (a *Aggregator) RowPackets() [][]uint64 {
	a.normalize()
	out := make([][]uint64, max(len(a.names), len(a.tables)))
	for i := range out {
		out[i] = make([]uint64, 1<<16)
		if i >= len(a.tables) || a.tables[i] == nil { // a table no packet reached
			continue
		}
		t := a.tables[i]
		for r, row := range t.rows {
			out[i][r] = row.count.Packets
		}
	}
	return out
}
