package classify_test

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/director/director/internal/datapath/classify"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// A Classifier remembers each flow's fate; it must give every packet the
// Result the reference model computes from scratch (less the packet's own
// bytes and lengths), truncated ones included.
func TestClassifierMatchesDatapath(t *testing.T) {
	for _, cfg := range []string{"medium.json", "ipv6.json", "glb-example.json"} {
		for _, mode := range []int{0, 1, 2} {
			// 1: the alternate hash; 2: a link MTU the larger packets do
			// not fit once encapsulated, which is each packet's own.
			alt := mode == 1
			src, err := config.Load("../../../testdata/configs/" + cfg)
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
			if mode == 2 {
				dc.OutboundMTU = 1280
			}
			d := model.New(dc, [6]byte{2, 0, 0, 0, 0, 9}, src.Tables)
			c, c2 := classify.New(d), classify.New(d)
			const flowLimit = 200 // c2 remembers fewer flows than there are
			classify.SetFlowLimit(c2, flowLimit)
			beyond := 0
			var frames [][]byte
			if _, err := pcapfile.Generate(src.Config, pcapfile.GenOptions{Flows: 300, Seed: 3}, func(_ time.Time, f []byte) error {
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
			tx, tooBig := 0, 0
			for i, f := range frames {
				want := d.Classify(f)
				want.Out, want.IPLen, want.OuterLen, want.GLB = nil, 0, 0, 0
				got, gotID := c.Classify(f)
				if want.Parsed != gotID.Valid() {
					t.Fatalf("%s alt=%v frame %d: parsed %v but flow %v", cfg, alt, i, want.Parsed, gotID.Valid())
				}
				n := gotID.Number()
				if gotID.Valid() {
					k := [5]any{got.Client, got.VIP, got.ClientPort, got.VIPPort, [2]any{got.Proto, got.Echo}}
					if prev, ok := flowOf[n]; ok && prev != k {
						t.Fatalf("%s frame %d: flow %d is %v and %v", cfg, i, n, prev, k)
					}
					flowOf[n] = k
				}
				// FlowOf numbers the same flows the same way, up to its
				// limit, and FlowResult is the packet's Result less its own
				// lengths and bytes.
				var ps classify.Parsed
				classify.Parse(f, &ps)
				var first model.Result
				id, reason, fresh := c2.FlowOf(&ps, &first)
				past := gotID.Valid() && n > flowLimit
				if (past && id.Valid()) || (!past && id.Number() != n) || (!id.Valid() && !want.Parsed && reason != want.Reason) {
					t.Fatalf("%s alt=%v frame %d: FlowOf gives %d/%d, Classify %d/%d", cfg, alt, i, id.Number(), reason, n, want.Reason)
				}
				if id.Valid() && id.Classifier() != c2 {
					t.Fatalf("%s frame %d: FlowOf's ID is another Classifier's", cfg, i)
				}
				if fresh != (past || (id.Valid() && !seen[id.Number()])) {
					t.Fatalf("%s alt=%v frame %d: FlowOf says fresh %v for flow %d", cfg, alt, i, fresh, id.Number())
				}
				// The flow's Result: whether the packet fits the link is
				// its own.
				wantFlow := want
				wantFlow.TooBig = 0
				if want.TooBig != 0 {
					tooBig++
				}
				if id.Valid() {
					seen[id.Number()] = true
					if fr := c2.FlowResult(id); !reflect.DeepEqual(wantFlow, fr) {
						t.Fatalf("%s alt=%v frame %d: FlowResult\nwant %+v\ngot  %+v", cfg, alt, i, wantFlow, fr)
					}
				}
				// A new flow's first Result is FlowResult's; a flow
				// past the limit has its Result every time.
				if fresh && !reflect.DeepEqual(wantFlow, first) {
					t.Fatalf("%s alt=%v frame %d: FlowOf's first Result\nwant %+v\ngot  %+v", cfg, alt, i, wantFlow, first)
				}
				if past {
					beyond++
				}
				if !reflect.DeepEqual(want, got) {
					t.Fatalf("%s alt=%v frame %d:\nwant %+v\ngot  %+v", cfg, alt, i, want, got)
				}
				if want.Verdict == model.XDPTX {
					tx++
				}
			}
			if mode == 2 && tooBig == 0 {
				t.Fatalf("%s: no packet too big for a link of 1,280 bytes: the test is not testing that", cfg)
			}
			if tx < len(frames)/2 || len(flowOf) < 300 || beyond < 100 {
				t.Fatalf("%s: only %d of %d frames steered, %d flows, %d past the limit: the test is not testing", cfg, tx, len(frames), len(flowOf), beyond)
			}
		}
	}
}
