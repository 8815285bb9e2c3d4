package classify_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/director/director/internal/datapath/classify"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// benchModel is the medium config's datapath, and generated traffic to
// its binds.
func benchModel(b *testing.B, flows int) (*model.Datapath, [][]byte) {
	src, err := config.Load("../../../testdata/configs/medium.json")
	if err != nil {
		b.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	var frames [][]byte
	pcapfile.Generate(src.Config, pcapfile.GenOptions{Flows: flows, Seed: 1}, func(_ time.Time, f []byte) error {
		frames = append(frames, f)
		return nil
	})
	return model.New(dc, [6]byte{}, src.Tables), frames
}

// go test ./internal/datapath/classify -bench ClassifierHot: a Classifier on frames of
// flows it has seen, the common case of a replay.
func BenchmarkClassifierHot(b *testing.B) {
	m, frames := benchModel(b, 200)
	c := classify.New(m)
	for _, f := range frames {
		c.Classify(f)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Classify(frames[i%len(frames)])
	}
}

// go test ./internal/datapath/classify -bench Parse: the config-independent parse a
// replay's reader does for every packet.
func BenchmarkParse(b *testing.B) {
	_, frames := benchModel(b, 1)
	var frame []byte
	for _, f := range frames {
		if len(f) > 100 {
			frame = f
			break
		}
	}
	var p classify.Parsed
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		classify.Parse(frame, &p)
	}
}
