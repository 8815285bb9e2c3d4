//go:build linux

package inkernel

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/internal/replay"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// TestQUICReportIsWhatTheKernelCounted: for a table with QUIC-LB routing,
// where a connection ID sends a row's packets to a backend other than the
// row's primary, the report's per-backend packets are what the private
// director's own per-backend counters (what `stats` reads) say it sent
// each backend.
func TestQUICReportIsWhatTheKernelCounted(t *testing.T) {
	testenv.Kernel(t)
	src, err := config.Load("../../../testdata/configs/quic.json")
	if err != nil {
		t.Fatal(err)
	}
	var capture bytes.Buffer
	w, err := pcapfile.NewWriter(&capture)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pcapfile.Generate(src.Config, pcapfile.GenOptions{Flows: testenv.Reduced(4000), Seed: 5}, w.Write); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := pcapfile.NewReader(&capture)
	if err != nil {
		t.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	gw := [6]byte{2, 0, 0, 0, 0, 1}
	dc.GatewayMAC = gw[:]
	s := &Side{Path: "quic.json", Tables: src.Tables, Model: model.New(dc, gw, src.Tables)}
	if err := StartPrivate(dc).Serve(s); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	agg := replay.NewAggregator("quic.pcap", "pcap", []string{"h3"}, loader.CounterNames())
	if err := Run(r, "quic.pcap", s, nil, agg, nil, nil); err != nil {
		t.Fatal(err)
	}
	rep := agg.Report(1<<16, "")
	st, err := s.private.Stats()
	if err != nil {
		t.Fatal(err)
	}
	kernel := map[string]uint64{}
	for _, b := range st.Tables[0].Backends {
		kernel[b.IP] = b.Packets
	}
	reported := map[string]uint64{}
	for _, b := range rep.Tables[0].Backends {
		reported[b.IP] = b.Packets
	}
	for ip, n := range kernel {
		if reported[ip] != n {
			t.Errorf("backend %s: the kernel sent it %d packets, the report says %d", ip, n, reported[ip])
		}
	}
	if len(reported) > len(kernel) {
		t.Errorf("the report names backends the kernel has no counter for: %v (kernel %v)", reported, kernel)
	}
	// The capture must be one where rows and IDs disagree, or this tests
	// nothing a row-based report would get wrong.
	mixed := 0
	for _, h := range rep.HotRows {
		if len(h.SentTo) > 1 {
			mixed++
			var sum uint64
			for _, b := range h.SentTo {
				sum += b.Packets
			}
			if sum != h.Packets || h.SentTo[0].IP != h.Primary {
				t.Errorf("row %#x: %d packets, sent to %+v, primary %s", h.Row, h.Packets, h.SentTo, h.Primary)
			}
		}
	}
	if mixed == 0 {
		t.Fatal("no row's packets went to several backends")
	}
	t.Logf("%d rows sent to several backends; kernel %v", mixed, kernel)
}
