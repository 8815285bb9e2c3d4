package model_test

import (
	"net/netip"
	"testing"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// TestResultSaysHowItSteered: a Result carries the bind that took the
// packet and the row its flow hashed to, whenever the program got that
// far, a packet passed after its bind matched included, so that explain
// reads them rather than working them out again.
func TestResultSaysHowItSteered(t *testing.T) {
	src, err := config.Load("../../../testdata/configs/medium.json")
	if err != nil {
		t.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	dc.ForwardICMPEcho = false
	refs := table.Refs(src.Tables)
	client := netip.MustParseAddr("198.51.100.7")
	for i, ref := range refs {
		b := ref.Bind
		if b.Proto != table.ProtoTCP || !b.Prefix.Addr().Is4() {
			continue
		}
		vip := b.Prefix.Masked().Addr()
		if b.Prefix.Bits() < 32 {
			vip = vip.Next()
		}
		f := model.Flow{Client: client, ClientPort: 40000 + uint16(i), VIP: vip, VIPPort: b.PortStart, Proto: 6}
		wantBind, ok := table.MatchingBind(refs, vip, table.ProtoTCP, b.PortStart, false)
		if !ok {
			t.Fatalf("bind %s: %s port %d matches none", b, vip, b.PortStart)
		}
		tb := src.Tables[refs[wantBind].Table]
		wantRow, _, _ := tb.Lookup(model.FlowHash(tb.HashKey, f, dc.HashFields))

		d := model.New(dc, [6]byte{2, 0, 0, 0, 0, 9}, src.Tables)
		r := d.Process(pkt.Frame(pkt.IPv4(client, vip, 6, pkt.TCP(f.ClientPort, f.VIPPort, 0x02, nil), pkt.V4Opts{})))
		if r.Verdict != model.XDPTX || !r.Matched || r.Bind != wantBind || r.Table != refs[wantBind].Table || !r.Hashed || r.Row != wantRow {
			t.Errorf("bind %s: verdict %d matched %v bind %d table %d hashed %v row %d, want tx, bind %d, table %d, row %d",
				b, r.Verdict, r.Matched, r.Bind, r.Table, r.Hashed, r.Row, wantBind, refs[wantBind].Table, wantRow)
		}
		// Echo forwarding off: passed after the lookups.
		echo := d.Process(pkt.Frame(pkt.IPv4(client, vip, 1, pkt.ICMP(8, 0, 1, []byte("ping")), pkt.V4Opts{})))
		if echo.Verdict != model.XDPPass || !echo.Matched || !echo.Hashed {
			t.Errorf("bind %s, echo with forwarding off: verdict %d matched %v hashed %v, want passed, matched and hashed",
				b, echo.Verdict, echo.Matched, echo.Hashed)
		}
		// No config: the bind matched, no row was looked up.
		d.Configured = false
		r = d.Process(pkt.Frame(pkt.IPv4(client, vip, 6, pkt.TCP(f.ClientPort, f.VIPPort, 0x02, nil), pkt.V4Opts{})))
		if r.Verdict != model.XDPPass || !r.Matched || r.Bind != wantBind || r.Hashed {
			t.Errorf("bind %s, no config: verdict %d matched %v bind %d hashed %v, want passed, bind %d, not hashed",
				b, r.Verdict, r.Matched, r.Bind, r.Hashed, wantBind)
		}
		// Nothing bound: no bind.
		r = d.Process(pkt.Frame(pkt.IPv4(client, netip.MustParseAddr("192.0.2.200"), 6, pkt.TCP(1, 1, 0x02, nil), pkt.V4Opts{})))
		if r.Matched || r.Hashed {
			t.Errorf("an unbound address: matched %v hashed %v", r.Matched, r.Hashed)
		}
		return // one bind is enough; the classifier's test holds every flow
	}
	t.Fatal("medium.json has no IPv4 TCP bind")
}
