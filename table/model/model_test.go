package model_test

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/director/director/table"
	"github.com/director/director/table/capture"
	"github.com/director/director/table/model"
)

// A Classifier remembers each flow's fate; it must give every packet the
// Result the Datapath computes from scratch, truncated ones included.
func TestClassifierMatchesDatapath(t *testing.T) {
	for _, cfg := range []string{"medium.json", "ipv6.json", "glb-example.json"} {
		for _, alt := range []bool{false, true} {
			src, err := table.Load("../../testdata/configs/" + cfg)
			if err != nil {
				t.Fatal(err)
			}
			dc := table.DefaultDirectorConfig()
			dc.SrcIP = netip.MustParseAddr("192.0.2.1")
			if alt {
				dc.HashFields = table.HashSrcAddr | table.HashSrcPort
				dc.AltHashFields = table.HashSrcAddr
				dc.ForwardICMPEcho = false
			}
			d := model.New(dc, [6]byte{2, 0, 0, 0, 0, 9}, src.Tables)
			c, c2 := d.NewClassifier(), d.NewClassifier()
			const flowLimit = 200 // c2 remembers fewer flows than there are
			model.SetFlowLimit(c2, flowLimit)
			beyond := 0
			var frames [][]byte
			if _, err := capture.Generate(src.Config, capture.GenOptions{Flows: 300, Seed: 3}, func(_ time.Time, f []byte) error {
				frames = append(frames, f)
				if len(frames)%7 == 0 { // and cut short, now and then
					frames = append(frames, f[:len(f)*len(frames)%len(f)])
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			flowOf := map[int]any{}
			seen := map[int]bool{} // flows FlowOf has given
			tx := 0
			for i, f := range frames {
				want := d.Classify(f)
				got := c.Classify(f)
				if want.Parsed != (got.Flow > 0) {
					t.Fatalf("%s alt=%v frame %d: parsed %v but flow %d", cfg, alt, i, want.Parsed, got.Flow)
				}
				if got.Flow > 0 {
					k := [5]any{got.Client, got.VIP, got.ClientPort, got.VIPPort, [2]any{got.Proto, got.Echo}}
					if prev, ok := flowOf[got.Flow]; ok && prev != k {
						t.Fatalf("%s frame %d: flow %d is %v and %v", cfg, i, got.Flow, prev, k)
					}
					flowOf[got.Flow] = k
				}
				// FlowOf numbers the same flows the same way, up to its
				// limit, and FlowResult is the packet's Result less its own
				// lengths and bytes.
				var ps model.Parsed
				model.Parse(f, &ps)
				var first model.Result
				id, reason, fresh := c2.FlowOf(&ps, &first)
				wantID := got.Flow
				if wantID > flowLimit {
					wantID = -1
				}
				if id != wantID || (id == 0 && reason != want.Reason) {
					t.Fatalf("%s alt=%v frame %d: FlowOf gives %d/%d, Classify %d/%d", cfg, alt, i, id, reason, got.Flow, want.Reason)
				}
				if fresh != (id == -1 || (id > 0 && !seen[id])) {
					t.Fatalf("%s alt=%v frame %d: FlowOf says fresh %v for flow %d", cfg, alt, i, fresh, id)
				}
				exp := want
				exp.Flow, exp.Out, exp.IPLen, exp.OuterLen = max(id, 0), nil, 0, 0
				if id > 0 {
					seen[id] = true
					if fr := c2.FlowResult(id); !reflect.DeepEqual(exp, fr) {
						t.Fatalf("%s alt=%v frame %d: FlowResult\nwant %+v\ngot  %+v", cfg, alt, i, exp, fr)
					}
				}
				// A new flow's first Result is FlowResult's; a flow
				// past the limit has its Result every time.
				if fresh && !reflect.DeepEqual(exp, first) {
					t.Fatalf("%s alt=%v frame %d: FlowOf's first Result\nwant %+v\ngot  %+v", cfg, alt, i, exp, first)
				}
				if id == -1 {
					beyond++
				}
				got.Flow = 0
				if !reflect.DeepEqual(want, got) {
					t.Fatalf("%s alt=%v frame %d:\nwant %+v\ngot  %+v", cfg, alt, i, want, got)
				}
				if want.Verdict == model.XDPTX {
					tx++
				}
			}
			if tx < len(frames)/2 || len(flowOf) < 300 || beyond < 100 {
				t.Fatalf("%s: only %d of %d frames steered, %d flows, %d past the limit: the test is not testing", cfg, tx, len(frames), len(flowOf), beyond)
			}
		}
	}
}
