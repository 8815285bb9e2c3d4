package replay_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/classify"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/internal/replay"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

var reasons = []string{"processed", "matched", "encapsulated", "encap_bytes", "bind_fast", "pass_not_ip", "pass_vlan",
	"pass_malformed", "pass_fragment", "pass_ipv6_ext", "pass_proto", "pass_icmp_echo_off", "pass_no_bind"}

func sampleOf(n int, frame []byte, res *model.Result, id classify.FlowID, withID bool) *replay.Sample {
	var s replay.Sample
	if !withID {
		id = classify.FlowID{}
	}
	replay.FromModel(&s, n, len(frame), res, id)
	return &s
}

// Aggregators filled in parallel from chunks of a capture, finding flows
// by the Classifier's ids, merge into the report one aggregator gives when
// it is fed every packet in order and finds flows by their keys.
func TestMergeMatchesOneAggregator(t *testing.T) {
	src, err := config.Load("../../testdata/configs/medium.json")
	if err != nil {
		t.Fatal(err)
	}
	changed, err := config.Load("../../testdata/configs/medium.json")
	if err != nil {
		t.Fatal(err)
	}
	changed.Config.Tables[0].Backends[0].State = table.StateDraining
	changed.Config.Tables[0].Backends[1].Healthy = false
	changedTables, err := table.BuildAll(changed.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	cur, nw := model.New(dc, [6]byte{}, src.Tables), model.New(dc, [6]byte{}, changedTables)
	var frames [][]byte
	if _, err := pcapfile.Generate(src.Config, pcapfile.GenOptions{Flows: 2000, Seed: 9}, func(_ time.Time, f []byte) error {
		frames = append(frames, f)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	one := replay.NewAggregator("f", "pcap", []string{"a", "b", "c"}, reasons)
	for i, f := range frames {
		one.Captured(len(f), false)
		r := cur.Classify(f)
		one.Add(sampleOf(i+1, f, &r, classify.FlowID{}, false))
		r = nw.Classify(f)
		one.AddAgainst(sampleOf(i+1, f, &r, classify.FlowID{}, false))
	}
	want := one.Report(20, "new")

	type worker struct {
		agg      *replay.Aggregator
		cur, new *classify.Classifier
	}
	// owner gives a flow's worker: the first way, all share; the second,
	// as replay --model shares out flows, the first worker counts none,
	// so merging has the smaller aggregator take the larger's flows.
	for _, owner := range []func(h uint64) int{
		func(h uint64) int { return int(h % 3) },
		func(h uint64) int { return 1 + int(h%2) },
	} {
		ws := make([]worker, 3)
		// Workers, each counting the flows the hash of their keys gives it (in
		// any order: here backwards), with the packets of known flows counted
		// by CountFlow, merged as disjoint, as replay --model does.
		for i := range ws {
			ws[i] = worker{replay.NewAggregator("f", "pcap", []string{"a", "b", "c"}, reasons), classify.New(cur), classify.New(nw)}
		}
		var ps classify.Parsed
		counted := 0
		for i := len(frames) - 1; i >= 0; i-- { // backwards: order must not matter
			f := frames[i]
			classify.Parse(f, &ps)
			if ps.Reason() != 0 {
				ws[i%3].agg.Captured(len(f), false)
				ws[i%3].agg.CountOther(len(f), ps.Reason())
				continue
			}
			w := ws[owner(ps.Hash())]
			w.agg.Captured(len(f), false)
			var first model.Result
			id, _, fresh := w.cur.FlowOf(&ps, &first)
			if w.agg.CountFlow(id, len(f)) {
				counted++
			} else {
				r := first
				if !fresh {
					r = w.cur.FlowResult(id)
				}
				w.agg.Add(sampleOf(i+1, f, &r, id, i%5 != 0)) // some found by key, as when a Classifier is full
			}
			nid, _, _ := w.new.FlowOf(&ps, nil)
			r := w.new.FlowResult(nid)
			w.agg.AddAgainstFlow(id, sampleOf(i+1, f, &r, nid, true))
		}
		for _, w := range ws[1:] {
			ws[0].agg.MergeDisjoint(w.agg)
		}
		got := ws[0].agg.Report(20, "new")
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("report of disjoint workers differs:\nwant %+v\ngot  %+v", want, got)
		}
		if counted < len(frames)/2 {
			t.Fatalf("only %d of %d packets were counted by CountFlow", counted, len(frames))
		}
	}
	if want.Against.Flows < 1500 || want.Against.PrimaryChanged.Flows == 0 || len(want.HotRows) != 20 {
		t.Fatalf("the capture does not exercise the report: %+v", want.Against)
	}
}

// A flow whose packets went different ways keeps the way of its earliest
// packet, whatever the order they were added in.
func TestFlowKeepsEarliestPacket(t *testing.T) {
	k := replay.FlowKey{Client: netip.MustParseAddr("198.18.0.1"), VIP: netip.MustParseAddr("10.20.0.1"), ClientPort: 1, VIPPort: 80, Proto: 6}
	hop := func(s string) []netip.Addr {
		return []netip.Addr{netip.MustParseAddr(s), netip.MustParseAddr("10.0.0.9")}
	}
	s := func(n int, h string) *replay.Sample {
		return &replay.Sample{N: n, Bytes: 100, Verdict: model.XDPTX, HasFlow: true, Flow: k, Table: 0, Row: 5, Hops: hop(h), Primary: hop(h)[0]}
	}
	a := replay.NewAggregator("f", "pcap", []string{"t"}, reasons)
	a.Add(s(10, "10.0.0.2")) // a later packet first
	a.AddAgainst(s(10, "10.0.0.2"))
	a.Add(s(3, "10.0.0.1"))
	a.AddAgainst(s(3, "10.0.0.3"))
	r := a.Report(5, "new")
	// Under the current config the flow went to .1 first; under the new
	// one to .3, which does not include .1: it breaks.
	if r.Tables[0].Flows != 1 || r.Against.Break.Flows != 1 || r.Against.Break.Packets != 2 {
		t.Fatalf("tables %+v, against %+v", r.Tables, r.Against)
	}
	var flows uint64
	for _, b := range r.Tables[0].Backends {
		if b.IP == "10.0.0.1" {
			flows = b.Flows
		}
	}
	if flows != 1 {
		t.Fatalf("the flow is not counted on its first primary: %+v", r.Tables[0].Backends)
	}
}

// TestRowSentToSeveralBackends: packets of one row sent to several
// backends (by QUIC connection ID) are credited to each, in one Aggregator
// or in two merged, and the row says where they went.
func TestRowSentToSeveralBackends(t *testing.T) {
	s := func(n, port int, to string) *replay.Sample {
		k := replay.FlowKey{Client: netip.MustParseAddr("198.18.0.1"), VIP: netip.MustParseAddr("10.20.0.1"), ClientPort: uint16(port), VIPPort: 443, Proto: 17}
		h := []netip.Addr{netip.MustParseAddr(to), netip.MustParseAddr("10.0.0.9")}
		return &replay.Sample{N: n, Bytes: 100, Verdict: model.XDPTX, HasFlow: true, Flow: k, Table: 0, Row: 7, Hops: h, Primary: h[0]}
	}
	packets := []*replay.Sample{s(1, 1, "10.0.0.1"), s(2, 1, "10.0.0.2"), s(3, 2, "10.0.0.2"), s(4, 3, "10.0.0.1"), s(5, 2, "10.0.0.2"), s(6, 4, "10.0.0.3")}
	one := replay.NewAggregator("f", "pcap", []string{"t"}, reasons)
	for _, p := range packets {
		one.Add(p)
	}
	a, b := replay.NewAggregator("f", "pcap", []string{"t"}, reasons), replay.NewAggregator("f", "pcap", []string{"t"}, reasons)
	for _, p := range packets {
		if p.Flow.ClientPort%2 == 1 {
			a.Add(p)
		} else {
			b.Add(p)
		}
	}
	a.MergeDisjoint(b)
	for name, r := range map[string]*replay.Report{"one": one.Report(5, ""), "merged": a.Report(5, "")} {
		got := map[string]uint64{}
		for _, b := range r.Tables[0].Backends {
			got[b.IP] = b.Packets
		}
		if got["10.0.0.1"] != 2 || got["10.0.0.2"] != 3 || got["10.0.0.3"] != 1 || len(got) != 3 {
			t.Errorf("%s: backends %+v", name, r.Tables[0].Backends)
		}
		row := r.HotRows[0]
		want := []replay.RowBackend{{IP: "10.0.0.2", Count: replay.Count{Packets: 3, Bytes: 300}},
			{IP: "10.0.0.1", Count: replay.Count{Packets: 2, Bytes: 200}}, {IP: "10.0.0.3", Count: replay.Count{Packets: 1, Bytes: 100}}}
		if row.Packets != 6 || row.Primary != "10.0.0.2" || !slices.Equal(row.SentTo, want) {
			t.Errorf("%s: row %+v", name, row)
		}
	}
}

// TestOtherVerdictsAreTheirOwn: a kernel verdict other than XDP_TX and
// XDP_PASS is reported under its name, not counted as passed.
func TestOtherVerdictsAreTheirOwn(t *testing.T) {
	a := replay.NewAggregator("x.pcap", "pcap", []string{"api"}, reasons)
	a.Add(&replay.Sample{N: 1, Bytes: 60, Verdict: 0, Reason: -1, Table: -1})
	a.Add(&replay.Sample{N: 2, Bytes: 70, Verdict: 1, Reason: -1, Table: -1})
	a.Add(&replay.Sample{N: 3, Bytes: 80, Verdict: model.XDPPass, Reason: abi.CPassProto, Table: -1})
	r := a.Report(0, "")
	want := map[string]replay.Count{"aborted": {Packets: 1, Bytes: 60}, "drop": {Packets: 1, Bytes: 70}, "pass": {Packets: 1, Bytes: 80}}
	if !reflect.DeepEqual(r.Verdicts, want) {
		t.Errorf("verdicts %+v, want %+v", r.Verdicts, want)
	}
	if len(r.Reasons) != 1 || r.Reasons["pass_proto"].Packets != 1 {
		t.Errorf("reasons %+v", r.Reasons)
	}
}

// TestFlowIDsOfOneClassifier: an Aggregator refuses flow IDs of a second
// Classifier for the same side: their numbers would name other flows.
func TestFlowIDsOfOneClassifier(t *testing.T) {
	src, err := config.Load("../../testdata/configs/small.json")
	if err != nil {
		t.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	d := model.New(dc, [6]byte{}, src.Tables)
	f := pkt.Frame(pkt.IPv4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("10.10.10.10"), 6, pkt.TCP(1000, 80, 2, nil), pkt.V4Opts{}))
	a := replay.NewAggregator("f", "pcap", []string{"api"}, reasons)
	for i, c := range []*classify.Classifier{classify.New(d), classify.New(d)} {
		r, id := c.Classify(f)
		func() {
			defer func() {
				if p := recover(); (p != nil) != (i == 1) {
					t.Errorf("classifier %d: panic %v", i, p)
				}
			}()
			a.Add(sampleOf(1, f, &r, id, true))
		}()
	}
}

// TestRunModelMatchesReference replays a capture file with RunModel (the
// reader hands flows to workers, known flows are counted with an add, the
// workers' reports merge), with one CPU and three, and with and without a
// change against it: the report is the one the reference model gives
// packet by packet.
func TestRunModelMatchesReference(t *testing.T) {
	src, err := config.Load("../../testdata/configs/medium.json")
	if err != nil {
		t.Fatal(err)
	}
	changed, _ := config.Load("../../testdata/configs/medium.json")
	changed.Config.Tables[0].Backends[0].State = table.StateDraining
	changedTables, err := table.BuildAll(changed.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	cur, nw := model.New(dc, [6]byte{}, src.Tables), model.New(dc, [6]byte{}, changedTables)
	path := filepath.Join(t.TempDir(), "c.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := pcapfile.NewWriter(f)
	var frames [][]byte
	if _, err := pcapfile.Generate(src.Config, pcapfile.GenOptions{Flows: 3000, Seed: 4}, func(ts time.Time, fr []byte) error {
		frames = append(frames, fr)
		return w.Write(ts, fr)
	}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	f.Close()
	for _, against := range []*model.Datapath{nil, nw} {
		one := replay.NewAggregator(path, "pcap", []string{"a", "b", "c"}, reasons)
		for i, f := range frames {
			one.Captured(len(f), false)
			r := cur.Classify(f)
			one.Add(sampleOf(i+1, f, &r, classify.FlowID{}, false))
			if against != nil {
				r = against.Classify(f)
				one.AddAgainst(sampleOf(i+1, f, &r, classify.FlowID{}, false))
			}
		}
		name := ""
		if against != nil {
			name = "new"
		}
		want := one.Report(10, name)
		for _, procs := range []int{1, 3} {
			old := runtime.GOMAXPROCS(procs)
			r, err := pcapfile.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			agg := replay.NewAggregator(path, r.FileFormat, []string{"a", "b", "c"}, reasons)
			var read atomic.Uint64
			err = replay.RunModel(r, path, cur, against, agg, &read)
			r.Close()
			runtime.GOMAXPROCS(old)
			if err != nil {
				t.Fatal(err)
			}
			if got := agg.Report(10, name); !reflect.DeepEqual(want, got) {
				t.Fatalf("against %v, %d CPUs: RunModel's report differs from the reference's:\nwant %+v\ngot  %+v", against != nil, procs, want, got)
			}
			if read.Load() != uint64(len(frames)) {
				t.Errorf("read %d of %d packets", read.Load(), len(frames))
			}
		}
	}
}
