package model_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/director/director/table"
	"github.com/director/director/table/capture"
	"github.com/director/director/table/model"
	"github.com/director/director/table/pkt"
)

// benchModel is the medium config's datapath.
func benchModel(b *testing.B) (*table.Source, *model.Datapath) {
	src, err := table.Load("../../testdata/configs/medium.json")
	if err != nil {
		b.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	return src, model.New(dc, [6]byte{}, src.Tables)
}

// benchFrames is generated traffic to the config's binds.
func benchFrames(src *table.Source, flows int) [][]byte {
	var frames [][]byte
	capture.Generate(src.Config, capture.GenOptions{Flows: flows, Seed: 1}, func(_ time.Time, f []byte) error {
		frames = append(frames, f)
		return nil
	})
	return frames
}

// go test ./table/model -bench Classify
func BenchmarkClassify(b *testing.B) {
	_, m := benchModel(b)
	frame := pkt.Frame(pkt.IPv4(netip.MustParseAddr("198.18.0.9"), netip.MustParseAddr("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x10, make([]byte, 400)), pkt.V4Opts{}))
	if m.Classify(frame).Verdict != model.XDPTX {
		b.Fatal("not steered")
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m.Classify(frame)
	}
}

// go test ./table/model -bench ClassifierHot: a Classifier on frames of
// flows it has seen, the common case of a replay.
func BenchmarkClassifierHot(b *testing.B) {
	src, m := benchModel(b)
	frames := benchFrames(src, 200)
	c := m.NewClassifier()
	for _, f := range frames {
		c.Classify(f)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Classify(frames[i%len(frames)])
	}
}

// go test ./table/model -bench Parse: the config-independent parse a
// replay's reader does for every packet.
func BenchmarkParse(b *testing.B) {
	src, _ := benchModel(b)
	var frame []byte
	for _, f := range benchFrames(src, 1) {
		if len(f) > 100 {
			frame = f
			break
		}
	}
	var p model.Parsed
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		model.Parse(frame, &p)
	}
}
