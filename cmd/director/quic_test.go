package main

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// TestCIDLookupMatchesTheKernel: what show --lookup says of a connection
// ID is where the program sends a packet carrying it, in a long header and
// (at the table's ID length) a short one, for IDs of every kind: each
// backend's (serving or not), unknown ones, other configs, 0b111.
func TestCIDLookupMatchesTheKernel(t *testing.T) {
	testenv.Kernel(t)
	src, err := config.Load(cfgDir + "quic.json")
	if err != nil {
		t.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	dc.GatewayMAC = net.HardwareAddr{2, 0, 0, 0, 0, 3}
	d, err := loader.Private(&dc, src.Tables)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	testenv.Hold(t, d.Prog)
	tab := src.Tables[0]
	vip := netip.MustParseAddr("10.10.10.10")
	rng := rand.New(rand.NewPCG(37, 1))
	seen := map[string]bool{}
	// 250 IDs meet every result below (the sequence is seeded); the host
	// looks up more.
	for i := 0; i < max(testenv.Reduced(2000), 250); i++ {
		cid := make([]byte, tab.QUIC.CIDLen())
		for j := range cid {
			cid[j] = byte(rng.Uint32())
		}
		if rng.IntN(4) != 0 {
			cid[0] = cid[0]&0x1f | tab.QUIC.ConfigID<<5
			copy(cid[1:], tab.Backends[rng.IntN(len(tab.Backends))].ServerID)
		}
		ls, err := lookupCID(src.Tables, cid, "")
		if err != nil {
			t.Fatal(err)
		}
		l := ls[0]
		seen[l.Counter] = true
		client := netip.AddrFrom4([4]byte{198, 51, byte(rng.Uint32()), byte(rng.Uint32())})
		_, primary, _ := tab.Lookup(table.FlowHash(tab.HashKey, table.AddrBytes(client)))
		want := l.Backend
		if want == "" {
			want = primary.IP.String()
		}
		long := append([]byte{0xc3, 0, 0, 0, 1, byte(len(cid))}, cid...)
		short := append([]byte{0x43}, cid...)
		for _, payload := range [][]byte{long, short} {
			payload = append(payload, make([]byte, 40)...)
			frame := pkt.Frame(pkt.IPv4(client, vip, 17, pkt.UDP(40000, 443, payload), pkt.V4Opts{}))
			verdict, out, err := testrun.Run(d.Prog, frame)
			if err != nil || verdict != 3 {
				t.Fatalf("ID %x: verdict %d, %v", cid, verdict, err)
			}
			if got, _ := netip.AddrFromSlice(out[14+16 : 14+20]); got.String() != want {
				t.Fatalf("ID %x (%s): lookup says %s, the kernel sent it to %s", cid, l.Counter, want, got)
			}
		}
	}
	for _, c := range []string{"quic_routed", "quic_fallback_unknown_id", "quic_fallback_other_config", "quic_fallback_unroutable"} {
		if !seen[c] {
			t.Errorf("no ID was looked up as %s", c)
		}
	}
}

// TestBuildWarnsOfQUIC: GLB's binary format cannot carry a table's QUIC-LB
// routing; build says so, and writes the rest.
func TestBuildWarnsOfQUIC(t *testing.T) {
	out := t.TempDir() + "/q.bin"
	_, errOut, code := runCmd("build", cfgDir+"quic.json", "-o", out)
	if code != 0 || !strings.Contains(errOut, `table "h3" (tables[0]): GLB's binary format has no place for its quic block and server IDs`) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, errOut, code := runCmd("build", cfgDir+"small.json", "-o", out); code != 0 || strings.Contains(errOut, "quic") {
		t.Fatalf("a table without QUIC: exit %d: %s", code, errOut)
	}
}
