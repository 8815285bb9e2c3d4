package replay_test

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/director/director/table"
	"github.com/director/director/table/capture"
	"github.com/director/director/table/model"
	"github.com/director/director/table/replay"
)

var reasons = []string{"processed", "matched", "encapsulated", "encap_bytes", "bind_fast", "pass_not_ip", "pass_vlan",
	"pass_malformed", "pass_fragment", "pass_ipv6_ext", "pass_proto", "pass_icmp_echo_off", "pass_no_bind"}

func sampleOf(n int, frame []byte, res *model.Result, withID bool) *replay.Sample {
	var s replay.Sample
	replay.FromModel(&s, n, len(frame), res)
	if !withID {
		s.FlowID = 0
	}
	return &s
}

// Aggregators filled in parallel from chunks of a capture, finding flows
// by the Classifier's ids, merge into the report one aggregator gives when
// it is fed every packet in order and finds flows by their keys.
func TestMergeMatchesOneAggregator(t *testing.T) {
	src, err := table.Load("../../testdata/configs/medium.json")
	if err != nil {
		t.Fatal(err)
	}
	changed, err := table.Load("../../testdata/configs/medium.json")
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
	if _, err := capture.Generate(src.Config, capture.GenOptions{Flows: 2000, Seed: 9}, func(_ time.Time, f []byte) error {
		frames = append(frames, f)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	one := replay.NewAggregator("f", "pcap", []string{"a", "b", "c"}, reasons)
	for i, f := range frames {
		one.Captured(len(f), false)
		r := cur.Classify(f)
		one.Add(sampleOf(i+1, f, &r, false))
		r = nw.Classify(f)
		one.AddAgainst(sampleOf(i+1, f, &r, false))
	}
	want := one.Report(20, "new")

	type worker struct {
		agg      *replay.Aggregator
		cur, new *model.Classifier
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
			ws[i] = worker{replay.NewAggregator("f", "pcap", []string{"a", "b", "c"}, reasons), cur.NewClassifier(), nw.NewClassifier()}
		}
		var ps model.Parsed
		counted := 0
		for i := len(frames) - 1; i >= 0; i-- { // backwards: order must not matter
			f := frames[i]
			model.Parse(f, &ps)
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
				w.agg.Add(sampleOf(i+1, f, &r, i%5 != 0)) // some found by key, as when a Classifier is full
			}
			nid, _, _ := w.new.FlowOf(&ps, nil)
			r := w.new.FlowResult(nid)
			w.agg.AddAgainstFlow(id, sampleOf(i+1, f, &r, true))
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

// TestOtherVerdictsAreTheirOwn: a kernel verdict other than XDP_TX and
// XDP_PASS is reported under its name, not counted as passed.
func TestOtherVerdictsAreTheirOwn(t *testing.T) {
	a := replay.NewAggregator("x.pcap", "pcap", []string{"api"}, reasons)
	a.Add(&replay.Sample{N: 1, Bytes: 60, Verdict: 0, Reason: -1, Table: -1})
	a.Add(&replay.Sample{N: 2, Bytes: 70, Verdict: 1, Reason: -1, Table: -1})
	a.Add(&replay.Sample{N: 3, Bytes: 80, Verdict: model.XDPPass, Reason: model.PassProto, Table: -1})
	r := a.Report(0, "")
	want := map[string]replay.Count{"aborted": {Packets: 1, Bytes: 60}, "drop": {Packets: 1, Bytes: 70}, "pass": {Packets: 1, Bytes: 80}}
	if !reflect.DeepEqual(r.Verdicts, want) {
		t.Errorf("verdicts %+v, want %+v", r.Verdicts, want)
	}
	if len(r.Reasons) != 1 || r.Reasons["pass_proto"].Packets != 1 {
		t.Errorf("reasons %+v", r.Reasons)
	}
}
