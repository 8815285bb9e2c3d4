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
