package loader

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

// counterConfig is one table of two backends; the second's address is
// given.
func counterConfig(second string) string {
	return strings.ReplaceAll(`{"tables": [{"name": "web", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
 "binds": [{"ip": "10.20.0.1", "proto": "tcp", "port": 80}],
 "backends": [{"ip": "192.168.10.1", "state": "active", "healthy": true}, {"ip": "SECOND", "state": "active", "healthy": true}]}]}`,
		"SECOND", second)
}

// TestNewBackendCountsFromZero: a backend that replaces another in a
// table takes the counter index the other left, in the table's counters
// (its stats id kept), and must start from zero there, while the backend
// kept keeps its count.
func TestNewBackendCountsFromZero(t *testing.T) {
	testenv.Kernel(t)
	d, err := Load(testDir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dc := directorConfig()
	if _, err := d.applyChange(change{Tables: testTables(t, counterConfig("192.168.10.2")), Config: &dc}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range byte(64) { // clients: the flow hash is of the source address
		f := pkt.Frame(pkt.IPv4(netip.AddrFrom4([4]byte{203, 0, 113, i + 1}), netip.MustParseAddr("10.20.0.1"), 6,
			pkt.TCP(40000, 80, 0x10, nil), pkt.V4Opts{}))
		if v, _, err := testrun.Run(d.Prog, f); err != nil || v != 3 {
			t.Fatalf("frame %d: verdict %d, %v; want XDP_TX", i, v, err)
		}
	}
	count := func() map[string]uint64 {
		st, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint64{}
		for _, b := range st.Tables[0].Backends {
			out[b.IP] = b.Packets
		}
		return out
	}
	before := count()
	if before["192.168.10.1"] == 0 || before["192.168.10.2"] == 0 {
		t.Fatalf("the frames did not reach both backends: %v", before)
	}
	if _, err := d.applyChange(change{Tables: testTables(t, counterConfig("192.168.10.3")), Config: &dc}, nil); err != nil {
		t.Fatal(err)
	}
	after := count()
	if fmt.Sprint(after) != fmt.Sprint(map[string]uint64{"192.168.10.1": before["192.168.10.1"], "192.168.10.3": 0}) {
		t.Errorf("after replacing 192.168.10.2 with 192.168.10.3: %v (before: %v)", after, before)
	}
}
