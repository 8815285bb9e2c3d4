package table

import (
	"slices"
	"strings"
	"testing"
)

// quicTable is a three-backend table with QUIC-LB routing (config 1,
// two-byte server IDs).
func quicTable(t *testing.T, edit func(*TableConfig)) *Table {
	t.Helper()
	c, err := parseConfig([]byte(`{"tables": [{"name": "q", "hash_key": "0f0e0d0c0b0a09080706050403020100", "seed": "00112233445566778899aabbccddeeff",
	  "quic": {"config_id": 1, "server_id_len": 2, "nonce_len": 6},
	  "binds": [{"ip": "10.60.0.1", "proto": "udp", "port": 443}],
	  "backends": [{"ip": "10.50.0.11", "state": "active", "healthy": true, "server_id": "5e01"},
	               {"ip": "10.50.0.12", "state": "active", "healthy": true, "server_id": "5e02"},
	               {"ip": "10.50.0.13", "state": "active", "healthy": true, "server_id": "5e03"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Tables[0]
	tc.Backends = slices.Clone(tc.Backends)
	if edit != nil {
		edit(&tc)
	}
	return buildCfg(t, &tc)
}

// TestDiffQUICStranded: what makes a connection ID name another backend,
// or none, is unsafe, and the diff says what it strands; a drain, a
// removal, and turning routing on are not.
func TestDiffQUICStranded(t *testing.T) {
	t.Parallel()
	base := quicTable(t, nil)
	for _, c := range []struct {
		name string
		edit func(*TableConfig)
		want []string // each a reason, in order; none: safe
	}{
		{"server ID changed", func(tc *TableConfig) { tc.Backends[1].ServerID = "\x5e\x09" },
			[]string{"table q: backend 10.50.0.12's server ID changed (5e02 -> 5e09): its QUIC connections, which use IDs with 5e02, are stranded"}},
		{"server IDs swapped", func(tc *TableConfig) { tc.Backends[0].ServerID, tc.Backends[1].ServerID = "\x5e\x02", "\x5e\x01" },
			[]string{"backend 10.50.0.11's server ID changed (5e01 -> 5e02)", "backend 10.50.0.12's server ID changed (5e02 -> 5e01)",
				"server ID 5e02 moves from 10.50.0.12 to 10.50.0.11", "server ID 5e01 moves from 10.50.0.11 to 10.50.0.12"}},
		{"config changed", func(tc *TableConfig) { tc.QUIC.ConfigID = 2 },
			[]string{"QUIC-LB settings changed (config 1, 2-byte server IDs, 6-byte nonces -> config 2, 2-byte server IDs, 6-byte nonces)"}},
		{"turned off", func(tc *TableConfig) {
			tc.QUIC = QUIC{}
			for i := range tc.Backends {
				tc.Backends[i].ServerID = ""
			}
		}, []string{"QUIC-LB routing turned off"}},
		{"drain", func(tc *TableConfig) { tc.Backends[0].State = StateDraining }, nil},
		{"encrypted", func(tc *TableConfig) { tc.QUIC.Encrypted, tc.QUIC.Key = true, Key{1} },
			[]string{"QUIC-LB settings changed (config 1, 2-byte server IDs, 6-byte nonces -> config 1, 2-byte server IDs, 6-byte nonces, encrypted)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Compare([]*Table{base}, []*Table{quicTable(t, c.edit)})
			safe, reasons := Verdict(d)
			if safe != (len(c.want) == 0) || len(reasons) != len(c.want) {
				t.Fatalf("safe %v, reasons %q; want %d", safe, reasons, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(reasons[i], w) {
					t.Errorf("reason %d %q does not say %q", i, reasons[i], w)
				}
			}
			if td := d.Tables[0]; td.Status != StatusChanged || len(td.QUICStranded) != len(c.want) {
				t.Errorf("status %s, stranded %q", td.Status, td.QUICStranded)
			}
		})
	}
	// Turning routing on strands nothing: the servers issued the IDs
	// before (docs/operations.md).
	off := quicTable(t, func(tc *TableConfig) {
		tc.QUIC = QUIC{}
		for i := range tc.Backends {
			tc.Backends[i].ServerID = ""
		}
	})
	d := Compare([]*Table{off}, []*Table{base})
	if safe, reasons := Verdict(d); !safe || d.Tables[0].Status != StatusChanged || d.Tables[0].NewQUIC == nil || d.Tables[0].OldQUIC != nil {
		t.Errorf("turning routing on: safe %v %q, %+v", safe, reasons, d.Tables[0])
	}
}

// TestDiffQUICKeyChanged: a new key strands the connections whose IDs the
// old one encrypted; the diff says so without showing either key.
func TestDiffQUICKeyChanged(t *testing.T) {
	t.Parallel()
	key := func(k byte) func(*TableConfig) {
		return func(tc *TableConfig) { tc.QUIC.Encrypted, tc.QUIC.Key = true, Key{k, 0xab, 0xcd} }
	}
	d := Compare([]*Table{quicTable(t, key(0x11))}, []*Table{quicTable(t, key(0x22))})
	safe, reasons := Verdict(d)
	if safe || len(reasons) != 1 || !strings.Contains(reasons[0], "QUIC-LB key changed: connection IDs encrypted with the old key no longer name their backend") {
		t.Fatalf("safe %v, reasons %q", safe, reasons)
	}
	if strings.Contains(reasons[0], "abcd") || strings.Contains(reasons[0], "11ab") {
		t.Errorf("a key is shown: %s", reasons[0])
	}
	if safe, _ := Verdict(Compare([]*Table{quicTable(t, key(0x11))}, []*Table{quicTable(t, key(0x11))})); !safe {
		t.Error("the same key judged unsafe")
	}
}
