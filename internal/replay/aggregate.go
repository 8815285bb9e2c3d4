package replay

import (
	"math"
	"net/netip"
	"sort"

	"github.com/director/director/internal/datapath/chunk"
	"github.com/director/director/internal/datapath/classify"
	"github.com/director/director/internal/datapath/model"
)

// Aggregator builds a Report from samples. Per packet it does one map
// operation (its flow); everything else is counted in arrays, and per
// backend totals are derived from the rows at the end. A row's packets
// usually all go to its primary; those a connection ID sent elsewhere (a
// table with QUIC-LB routing) are counted apart, by row and backend, so
// that each backend is credited with what was sent to it. Nothing it
// keeps holds a pointer, so the garbage collector never scans it.
// Aggregators filled in parallel are combined with Merge.
type Aggregator struct {
	_       [128]byte
	r       Report
	names   []string
	reasons []string                 // pass reason names, by index
	noBind  int                      // the index of pass_no_bind in reasons, or -1
	verdict [len(verdictNames)]Count // by XDP action
	reason  []Count
	quic    []Count     // by QUIC counter (Sample.QUIC), indexed as reason
	tables  []*tableAgg // by table index
	flowIdx map[flowKey]int32
	flows   chunk.List[flowAgg]
	// byID and byIDNew map Sample.FlowID's number to 1 + an index in flows;
	// cls and clsNew are the Classifiers that number them.
	byID, byIDNew []int32
	cls, clsNew   *classify.Classifier
	// counts, by Sample.FlowID, holds what CountFlow counted and has not
	// yet moved to the flows (foldCounts): a dense array of small
	// records, so that counting a packet touches no flow record.
	counts    []idCount
	unindexed bool // flows has records flowIdx lacks (normalize)
	keyed     bool // some records were found by their key (flow)
	// Aggregators are filled in parallel and written for every packet:
	// padding keeps two of them from sharing a cache line.
	_ [128]byte
}

type idCount struct {
	bytes   uint64
	packets uint32
	fated   bool // the flow's record is fated (flowAgg.fated)
}

type tableAgg struct {
	count Count
	rows  []rowAgg // 1<<16 entries
	// elsewhere holds the packets of a row sent to a backend other than
	// the row's first (rowAgg.primary): routed by connection ID.
	elsewhere map[rowHop]Count
}

type rowAgg struct {
	count   Count // every packet of the row, wherever it was sent
	primary hop   // where the row's first packet was sent
}

type rowHop struct {
	row int32
	hop hop
}

// add counts c, packets of row sent to primary p.
func (t *tableAgg) add(row int32, p hop, c Count) {
	r := &t.rows[row]
	if r.count.Packets == 0 {
		r.primary = p
	}
	r.count.merge(c)
	if p != r.primary {
		if t.elsewhere == nil {
			t.elsewhere = map[rowHop]Count{}
		}
		k := rowHop{row, p}
		e := t.elsewhere[k]
		e.merge(c)
		t.elsewhere[k] = e
	}
}

// elsewhereByRow is elsewhere grouped by row.
func (t *tableAgg) elsewhereByRow() map[int32]map[hop]Count {
	out := map[int32]map[hop]Count{}
	for k, c := range t.elsewhere {
		if out[k.row] == nil {
			out[k.row] = map[hop]Count{}
		}
		out[k.row][k.hop] = c
	}
	return out
}

// sentTo is, for each backend, the packets of row sent to it; elsewhere
// is elsewhereByRow's entry for the row.
func (t *tableAgg) sentTo(row int32, elsewhere map[hop]Count) map[hop]Count {
	r := &t.rows[row]
	own := r.count
	out := map[hop]Count{}
	for h, c := range elsewhere {
		own.Packets -= c.Packets
		own.Bytes -= c.Bytes
		out[h] = c
	}
	if own.Packets > 0 {
		out[r.primary] = own
	}
	return out
}

// hop is a hop's address without pointers: its 16-byte form (IPv4
// mapped), since the hops of a table of IPv6 backends are IPv6.
type hop [16]byte

func hopOf(a netip.Addr) hop { return a.As16() }

// addr is the hop's address, IPv4 again where it was.
func (h hop) addr() netip.Addr { return netip.AddrFrom16(h).Unmap() }

// flowKey is FlowKey without pointers.
type flowKey struct {
	client, vip [16]byte
	cport       uint16
	vport       uint16
	proto       uint8
	v6          bool
}

// flowAgg is one flow.
type flowAgg struct {
	packets, bytes uint64
	// first and firstNew are the capture positions of the packets the
	// flow's fate under each config was taken from (0: none yet).
	first, firstNew int
	table           int32
	unmatched       bool
	oldTX, newTX    bool
	nOld, nNew      uint8
	old, new        [4]hop
	key             flowKey
	// Packets of the flow not yet counted in their row (flushRow).
	rowCount Count
	// Packets CountFlow counted and fold has not yet: they fared as the
	// flow's first, whose pass reason is reason.
	pend          Count
	reason        int16
	fated         bool
	rowTable, row int32
	rowPrimary    hop
}

// NewAggregator starts a report; names are the tables' names, in order,
// and reasons the names of pass reasons, by index.
func NewAggregator(file, format string, names, reasons []string) *Aggregator {
	a := &Aggregator{reasons: reasons, reason: make([]Count, len(reasons)), quic: make([]Count, len(reasons)), noBind: -1,
		r: Report{Version: 1, Capture: CaptureInfo{File: file, Format: format},
			Verdicts: map[string]Count{}, Reasons: map[string]Count{}, HotRows: []RowReport{}, Tables: []TableReport{}},
		names: names, flowIdx: map[flowKey]int32{},
	}
	for i, r := range reasons {
		if r == "pass_no_bind" {
			a.noBind = i
		}
	}
	return a
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
	if bytes > model.FirstBuffer {
		a.r.Capture.MultiBuffer++
	}
}

// NotRun counts a packet the kernel could not run (CaptureInfo.NotRun).
func (a *Aggregator) NotRun() { a.r.Capture.NotRun++ }

func hops4(hops []netip.Addr) (n uint8, out [4]hop) {
	for i, h := range hops {
		if i == len(out) {
			break
		}
		out[i] = hopOf(h)
		n++
	}
	return n, out
}

// Add accounts one packet under the current config. Packets must be added
// in capture order (ascending Sample.N) to one Aggregator.
func (a *Aggregator) Add(s *Sample) {
	if s.Verdict >= 0 && s.Verdict < len(a.verdict) {
		a.verdict[s.Verdict].add(s.Bytes)
	}
	if s.Verdict == model.XDPPass {
		if s.Reason >= 0 && s.Reason < len(a.reason) {
			a.reason[s.Reason].add(s.Bytes)
		}
	}
	if s.QUIC > 0 && s.QUIC < len(a.quic) {
		a.quic[s.QUIC].add(s.Bytes)
	}
	unmatched := s.HasFlow && s.Verdict == model.XDPPass && s.Reason >= 0 && s.Reason == a.noBind
	if unmatched {
		a.r.Unmatched.add(s.Bytes)
	}
	var f *flowAgg
	if s.HasFlow {
		f = a.flowOf(s, &a.byID, &a.cls)
		f.packets++
		f.bytes += uint64(s.Bytes)
		f.unmatched = f.unmatched || unmatched
		if f.first == 0 || (s.N > 0 && s.N < f.first) {
			f.first = max(s.N, 1)
			f.oldTX = s.TX() && s.Table >= 0
			f.table = int32(s.Table)
			f.nOld, f.old = hops4(s.Hops)
			f.reason = int16(s.Reason)
			// A flow found by its id has one fate (CountFlow); one found
			// by its key may have had packets fare differently.
			f.fated = s.FlowID.Valid() && (s.TX() == f.oldTX)
		}
		a.setFated(s.FlowID.Number(), f)
	}
	if s.TX() && s.Table >= 0 {
		t := a.table(s.Table)
		t.count.add(s.Bytes)
		primary := hopOf(s.Primary)
		row := int32(s.Row & 0xffff)
		if f == nil {
			t.add(row, primary, Count{Packets: 1, Bytes: uint64(s.Bytes)})
			return
		}
		// A flow's packets go to one row: count them in the flow, which
		// is in cache, and move them to the row only when that changes.
		if f.rowCount.Packets > 0 && (f.rowTable != int32(s.Table) || f.row != row || f.rowPrimary != primary) {
			a.flushRow(f)
		}
		f.rowTable, f.row, f.rowPrimary = int32(s.Table), row, primary
		f.rowCount.add(s.Bytes)
	}
}

// Replays through the model count most packets with CountFlow: what
// happens to a packet that parses depends only on its flow, so a packet of
// a flow already seen only adds to the flow, and the verdict, reason,
// table and row counts are brought up to date from the flows when the
// report is made (fold).

// CountFlow counts a packet of the flow a model Classifier numbered id (a
// Sample's FlowID), when that flow was already added (Add, with the
// FlowID): it then returns true. It returns false for a flow not seen
// yet: the caller adds the packet with Add, as the flow's first.
func (a *Aggregator) CountFlow(fid classify.FlowID, bytes int) bool {
	id := a.number(&a.cls, fid)
	if id <= 0 || id >= len(a.counts) || !a.counts[id].fated {
		return false
	}
	c := &a.counts[id]
	c.packets++
	c.bytes += uint64(bytes)
	if c.packets == math.MaxUint32 {
		a.foldCount(id)
	}
	return true
}

// setFated keeps counts[id].fated as the flow's record has it.
func (a *Aggregator) setFated(id int, f *flowAgg) {
	if id > 0 {
		for len(a.counts) <= id {
			a.counts = append(a.counts, make([]idCount, id+1-len(a.counts))...)
		}
		a.counts[id].fated = f.fated
	}
}

// foldCount moves what CountFlow counted for flow id to its record.
func (a *Aggregator) foldCount(id int) {
	c := &a.counts[id]
	if c.packets == 0 {
		return
	}
	f := a.flows.At(int(a.byID[id] - 1))
	f.pend.Packets += uint64(c.packets)
	f.pend.Bytes += c.bytes
	c.packets, c.bytes = 0, 0
}

// foldCounts moves everything CountFlow counted to the flows' records.
func (a *Aggregator) foldCounts() {
	for id := range a.counts {
		a.foldCount(id)
	}
}

// CountOther counts a packet that did not parse to a flow and was passed
// for reason.
func (a *Aggregator) CountOther(bytes, reason int) {
	a.verdict[model.XDPPass].add(bytes)
	if reason >= 0 && reason < len(a.reason) {
		a.reason[reason].add(bytes)
	}
}

// fold counts a flow's pending packets as Add would have, one by one.
func (a *Aggregator) fold(f *flowAgg) {
	p := f.pend
	if p.Packets == 0 {
		return
	}
	f.pend = Count{}
	f.packets += p.Packets
	f.bytes += p.Bytes
	if f.oldTX {
		a.verdict[model.XDPTX].merge(p)
		a.tables[f.rowTable].count.merge(p)
		f.rowCount.merge(p)
		return
	}
	a.verdict[model.XDPPass].merge(p)
	if f.reason >= 0 && int(f.reason) < len(a.reason) {
		a.reason[f.reason].merge(p)
	}
	if f.unmatched {
		a.r.Unmatched.merge(p)
	}
}

// flushRow moves what a flow counted for its row to the row.
func (a *Aggregator) flushRow(f *flowAgg) {
	if f.rowCount.Packets == 0 {
		return
	}
	a.tables[f.rowTable].add(f.row, f.rowPrimary, f.rowCount)
	f.rowCount = Count{}
}

func (a *Aggregator) flushRows() {
	a.foldCounts()
	for i := 0; i < a.flows.Len(); i++ {
		f := a.flows.At(i)
		a.fold(f)
		a.flushRow(f)
	}
}

// AddAgainst accounts the same packet under the other config.
func (a *Aggregator) AddAgainst(s *Sample) {
	if !s.HasFlow {
		return
	}
	a.setAgainst(a.flowOf(s, &a.byIDNew, &a.clsNew), s)
}

func (a *Aggregator) setAgainst(f *flowAgg, s *Sample) {
	if f.firstNew == 0 || (s.N > 0 && s.N < f.firstNew) {
		f.firstNew = max(s.N, 1)
		f.newTX = s.TX()
		f.nNew, f.new = hops4(s.Hops)
	}
}

// number is id's number, after checking id is of the Classifier *c,
// which the first valid ID sets.
func (a *Aggregator) number(c **classify.Classifier, id classify.FlowID) int {
	if !id.Valid() {
		return 0
	}
	if *c == nil {
		*c = id.Classifier()
	} else if *c != id.Classifier() {
		panic("replay: flows numbered by two Classifiers in one Aggregator")
	}
	return id.Number()
}

// byCurID is the flow the current config's Classifier numbered fid, if
// Add has had it.
func (a *Aggregator) byCurID(fid classify.FlowID) *flowAgg {
	id := a.number(&a.cls, fid)
	if id <= 0 || id >= len(a.byID) || a.byID[id] == 0 {
		return nil
	}
	return a.flows.At(int(a.byID[id] - 1))
}

// AddAgainstFlow is AddAgainst for a packet whose flow the current
// config's Classifier numbered curID and Add has had: the flow is found by
// that number, so the two configs' Classifiers need not number flows alike.
func (a *Aggregator) AddAgainstFlow(curID classify.FlowID, s *Sample) {
	if f := a.byCurID(curID); f != nil && s.HasFlow {
		a.setAgainst(f, s)
		return
	}
	a.AddAgainst(s)
}

// SeenAgainstFlow reports whether AddAgainstFlow already had the flow the
// current config's Classifier numbered curID.
func (a *Aggregator) SeenAgainstFlow(curID classify.FlowID) bool {
	f := a.byCurID(curID)
	return f != nil && f.firstNew != 0
}

func (a *Aggregator) table(i int) *tableAgg {
	for len(a.tables) <= i {
		a.tables = append(a.tables, nil)
	}
	t := a.tables[i]
	if t == nil {
		t = &tableAgg{rows: make([]rowAgg, 1<<16)}
		a.tables[i] = t
	}
	return t
}

// flowOf finds the sample's flow, by its FlowID when it has one (whose
// Classifier is *c's).
func (a *Aggregator) flowOf(s *Sample, byID *[]int32, c **classify.Classifier) *flowAgg {
	id := a.number(c, s.FlowID)
	if id <= 0 {
		return a.flow(s.Flow)
	}
	if id < len(*byID) {
		if i := (*byID)[id]; i > 0 {
			return a.flows.At(int(i - 1))
		}
	} else {
		*byID = append(*byID, make([]int32, id+1-len(*byID))...)
	}
	// A flow id not seen before: a new record, found by the id from now
	// on. It is not entered in flowIdx (a map insert per flow costs more
	// than the rest of the flow's packets); normalize merges the records
	// of one flow key that this leaves.
	i := a.flows.Append(flowAgg{key: keyOf(s.Flow), table: -1})
	a.unindexed = true
	(*byID)[id] = int32(i) + 1
	return a.flows.At(i)
}

func keyOf(k FlowKey) flowKey {
	return flowKey{client: k.Client.As16(), vip: k.VIP.As16(), cport: k.ClientPort, vport: k.VIPPort, proto: k.Proto, v6: k.Client.Is6()}
}

func (a *Aggregator) flow(k FlowKey) *flowAgg {
	fk := keyOf(k)
	i, ok := a.flowIdx[fk]
	if !ok {
		i = int32(a.flows.Append(flowAgg{key: fk, table: -1}))
		a.flowIdx[fk] = i
		a.keyed = true
	}
	return a.flows.At(int(i))
}

// normalize brings the counts up to date and, when records may repeat a
// key, leaves one record per flow key. Records made from Classifier
// numbers alone (none found by key) are one per key: a Classifier numbers
// each flow key once.
func (a *Aggregator) normalize() {
	a.flushRows()
	if !a.unindexed || !a.keyed {
		return
	}
	flows := a.flows
	a.flows = chunk.List[flowAgg]{}
	a.flowIdx = make(map[flowKey]int32, flows.Len())
	for i := 0; i < flows.Len(); i++ {
		a.mergeFlow(flows.At(i))
	}
	a.byID, a.byIDNew, a.counts, a.unindexed = nil, nil, nil, false
}

// mergeFlow adds a flow record to a's.
func (a *Aggregator) mergeFlow(of *flowAgg) {
	i, ok := a.flowIdx[of.key]
	if !ok {
		a.flowIdx[of.key] = int32(a.flows.Append(*of))
		return
	}
	f := a.flows.At(int(i))
	f.packets += of.packets
	f.bytes += of.bytes
	f.unmatched = f.unmatched || of.unmatched
	if of.first != 0 && (f.first == 0 || of.first < f.first) {
		f.first, f.oldTX, f.table, f.nOld, f.old = of.first, of.oldTX, of.table, of.nOld, of.old
	}
	if of.firstNew != 0 && (f.firstNew == 0 || of.firstNew < f.firstNew) {
		f.firstNew, f.newTX, f.nNew, f.new = of.firstNew, of.newTX, of.nNew, of.new
	}
}

// MergeDisjoint adds what o counted to a, when they counted disjoint sets
// of flows, as when each worker counts the flows a hash of their keys gives
// it, each with its own Classifiers: the flows are moved, not looked up.
// o is empty afterwards.
func (a *Aggregator) MergeDisjoint(o *Aggregator) {
	a.foldCounts()
	o.foldCounts()
	a.mergeCounts(o)
	// What flows counted and have not folded into the totals (fold,
	// flushRow) goes with them: a folds it as its own. The smaller list is
	// the one copied.
	if a.flows.Len() < o.flows.Len() {
		a.flows, o.flows = o.flows, a.flows
	}
	for i := 0; i < o.flows.Len(); i++ {
		a.flows.Append(*o.flows.At(i))
	}
	if o.flows.Len() > 0 || a.flows.Len() > 0 {
		a.unindexed = true
		a.flowIdx = map[flowKey]int32{} // rebuilt when an index is needed
	}
	a.keyed = a.keyed || o.keyed
	a.byID, a.byIDNew, a.counts = nil, nil, nil
	o.flows, o.flowIdx, o.byID, o.byIDNew, o.counts = chunk.List[flowAgg]{}, map[flowKey]int32{}, nil, nil, nil
}

// mergeCounts adds o's counts (not its flows) to a's.
func (a *Aggregator) mergeCounts(o *Aggregator) {
	c := &a.r.Capture
	c.Packets += o.r.Capture.Packets
	c.Bytes += o.r.Capture.Bytes
	c.Truncated += o.r.Capture.Truncated
	c.MultiBuffer += o.r.Capture.MultiBuffer
	c.NotRun += o.r.Capture.NotRun
	for i := range a.verdict {
		a.verdict[i].merge(o.verdict[i])
	}
	for i := range a.reason {
		a.reason[i].merge(o.reason[i])
		a.quic[i].merge(o.quic[i])
	}
	a.r.Unmatched.Count.merge(o.r.Unmatched.Count)
	for i, ot := range o.tables {
		if ot == nil {
			continue
		}
		t := a.table(i)
		t.count.merge(ot.count)
		others := ot.elsewhereByRow()
		for r := range ot.rows {
			if ot.rows[r].count.Packets == 0 {
				continue
			}
			if others[int32(r)] == nil {
				t.add(int32(r), ot.rows[r].primary, ot.rows[r].count)
				continue
			}
			for _, h := range sortedHops(ot.sentTo(int32(r), others[int32(r)])) {
				t.add(int32(r), h.hop, h.Count)
			}
		}
	}
}

func (c *Count) merge(o Count) {
	c.Packets += o.Packets
	c.Bytes += o.Bytes
}

// hopCount is a backend and what it was sent.
type hopCount struct {
	hop hop
	Count
}

// sortedHops is m's backends, the busiest first (then by address).
func sortedHops(m map[hop]Count) []hopCount {
	out := make([]hopCount, 0, len(m))
	for h, c := range m {
		out = append(out, hopCount{h, c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Packets != out[j].Packets {
			return out[i].Packets > out[j].Packets
		}
		return out[i].hop.addr().Less(out[j].hop.addr())
	})
	return out
}
