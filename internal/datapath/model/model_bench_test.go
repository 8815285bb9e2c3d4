package model_test

import (
	"net/netip"
	"testing"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// benchModel is the medium config's datapath.
func benchModel(b *testing.B) (*config.Source, *model.Datapath) {
	src, err := config.Load("../../../testdata/configs/medium.json")
	if err != nil {
		b.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	return src, model.New(dc, [6]byte{}, src.Tables)
}

// go test ./internal/datapath/model -bench Classify
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
