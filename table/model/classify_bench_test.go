package model_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/director/director/table"
	"github.com/director/director/table/capture"
	"github.com/director/director/table/model"
)

// go test ./table/model -bench ClassifierHot: a Classifier on frames of
// flows it has seen, the common case of a replay.
func BenchmarkClassifierHot(b *testing.B) {
	src, err := table.Load("../../testdata/configs/medium.json")
	if err != nil {
		b.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	m := model.New(dc, [6]byte{}, src.Tables)
	var frames [][]byte
	capture.Generate(src.Config, capture.GenOptions{Flows: 200, Seed: 1}, func(_ time.Time, f []byte) error {
		frames = append(frames, f)
		return nil
	})
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
	frame := capturedFrame(b)
	var p model.Parsed
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		model.Parse(frame, &p)
	}
}

func capturedFrame(b *testing.B) []byte {
	src, err := table.Load("../../testdata/configs/medium.json")
	if err != nil {
		b.Fatal(err)
	}
	var frame []byte
	capture.Generate(src.Config, capture.GenOptions{Flows: 1, Seed: 1}, func(_ time.Time, f []byte) error {
		if frame == nil && len(f) > 100 {
			frame = f
		}
		return nil
	})
	return frame
}
