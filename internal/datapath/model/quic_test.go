package model

import (
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/director/director/table"
)

// TestQUICRouteEncrypted: with a key, the model reads the server ID the
// draft's vectors encrypted (short headers and a long one), and without
// the key, or with another, the same ID names no backend.
func TestQUICRouteEncrypted(t *testing.T) {
	var key table.Key
	hex.Decode(key[:], []byte("8f95f09245765f80256934e50c66207f"))
	for _, v := range []struct {
		sid, cid   string
		sidLen, nl uint8
	}{
		{"ed793a", "0720b1d07b359d3c", 3, 4},
		{"ed793a51d49b8f5fab65", "2fcc381bc74cb4fbad2823a3d1f8fed2", 10, 5},
		{"ed793a51d49b8f5f", "504dd2d05a7b0de9b2b9907afb5ecf8cc3", 8, 8},
	} {
		cid, _ := hex.DecodeString(v.cid)
		sid, _ := hex.DecodeString(v.sid)
		rot := cid[0] >> 5
		tb := &table.Table{QUIC: table.QUIC{QUICConfig: table.QUICConfig{ConfigID: rot, ServerIDLen: v.sidLen, NonceLen: v.nl, Encrypted: true, Key: key}}}
		for i, id := range []string{"\x01\x02\x03" + string(sid[3:]), string(sid)} {
			tb.Backends = append(tb.Backends, table.Backend{IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), State: table.StateActive,
				Healthy: true, ServerID: table.ServerID(id)})
		}
		short := append(append([]byte{0x40}, cid...), make([]byte, 24)...)
		long := append(append([]byte{0xc0, 0, 0, 0, 1, byte(len(cid))}, cid...), make([]byte, 24)...)
		for name, p := range map[string][]byte{"short": short, "long": long} {
			if c, b := QUICRoute(tb, p); c != QUICRouted || b != 1 {
				t.Errorf("%s, %s header: counter %d, backend %d; want routed to 1", v.cid, name, c, b)
			}
		}
		tb.QUIC.Key[0] ^= 1
		if c, _ := QUICRoute(tb, short); c != QUICUnknownID {
			t.Errorf("%s with another key: counter %d", v.cid, c)
		}
		tb.QUIC.Key[0] ^= 1
		tb.QUIC.Encrypted = false
		if c, _ := QUICRoute(tb, short); c != QUICUnknownID {
			t.Errorf("%s read as plaintext: counter %d", v.cid, c)
		}
	}
}
