package table

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
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
		{"config changed", func(tc *TableConfig) { tc.QUIC.NonceLen = 7 },
			[]string{"QUIC-LB settings changed (config 1, 2-byte server IDs, 6-byte nonces -> config 1, 2-byte server IDs, 7-byte nonces)"}},
		{"config ID changed", func(tc *TableConfig) { tc.QUIC.ConfigID = 2 },
			[]string{"QUIC config 1 removed, and whether its IDs are still in use is not known"}},
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

// rotTable is quicTable's table with the QUIC-LB configs quic (a JSON
// list) and each backend's server_id sids[i] (JSON).
func rotTable(t *testing.T, quic string, sids ...string) *Table {
	t.Helper()
	c, err := parseConfig([]byte(`{"tables": [{"name": "q", "hash_key": "0f0e0d0c0b0a09080706050403020100", "seed": "00112233445566778899aabbccddeeff",
	  "quic": ` + quic + `,
	  "binds": [{"ip": "10.60.0.1", "proto": "udp", "port": 443}],
	  "backends": [{"ip": "10.50.0.11", "state": "active", "healthy": true, "server_id": ` + sids[0] + `},
	               {"ip": "10.50.0.12", "state": "active", "healthy": true, "server_id": ` + sids[1] + `}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return buildCfg(t, &c.Tables[0])
}

// TestDiffQUICRotation: adding a config strands nothing; removing one is
// judged by what its IDs carried lately (Base.QUICUse): safe once idle,
// unsafe in use or where that is not known; a change within a config that
// stays is judged as in a table of one.
func TestDiffQUICRotation(t *testing.T) {
	t.Parallel()
	one := rotTable(t, `{"config_id": 1, "server_id_len": 2, "nonce_len": 6}`, `"5e01"`, `"5e02"`)
	two := rotTable(t, `[{"config_id": 2, "server_id_len": 3, "nonce_len": 6, "key": "00112233445566778899aabbccddeeff"},
	  {"config_id": 1, "server_id_len": 2, "nonce_len": 6}]`, `{"1": "5e01", "2": "aa0001"}`, `{"1": "5e02", "2": "aa0002"}`)
	newOnly := rotTable(t, `[{"config_id": 2, "server_id_len": 3, "nonce_len": 6, "key": "00112233445566778899aabbccddeeff"}]`, `"aa0001"`, `"aa0002"`)
	if cs := two.QUIC.Configs(); len(cs) != 2 || cs[0].ConfigID != 1 || cs[1].ConfigID != 2 || two.Backends[1].ServerIDIn(1) != "\xaa\x00\x02" {
		t.Fatalf("configs %v, backend 1's IDs %q: want config 1 first, and each ID with its config", cs, two.Backends[1].MoreServerIDs)
	}
	idle := map[QUICUseKey]QUICUse{{Table: 0, Config: 1}: {Packets: 0, Total: 900, Window: 5 * time.Second}}
	busy := map[QUICUseKey]QUICUse{{Table: 0, Config: 1}: {Packets: 42, Total: 900, Window: 5 * time.Second}}
	rekeyed := rotTable(t, `[{"config_id": 1, "server_id_len": 2, "nonce_len": 6},
	  {"config_id": 2, "server_id_len": 3, "nonce_len": 6, "key": "ffeeddccbbaa99887766554433221100"}]`, `{"1": "5e01", "2": "aa0001"}`, `{"1": "5e02", "2": "aa0002"}`)
	moved := rotTable(t, `[{"config_id": 1, "server_id_len": 2, "nonce_len": 6},
	  {"config_id": 2, "server_id_len": 3, "nonce_len": 6, "key": "00112233445566778899aabbccddeeff"}]`, `{"1": "5e01", "2": "aa0009"}`, `{"1": "5e02", "2": "aa0002"}`)
	for _, c := range []struct {
		name     string
		old, new *Table
		use      map[QUICUseKey]QUICUse
		changes  string   // QUICConfigs, "id change recent" each
		want     []string // each a reason, in order; none: safe
	}{
		{"added", one, two, nil, "2 added -", nil},
		{"removed idle", two, newOnly, idle, "1 removed 0", nil},
		{"removed in use", two, newOnly, busy, "1 removed 42",
			[]string{"table q: QUIC config 1 removed while in use: 42 packets carried its IDs in the last 5s; its connections would be stranded"}},
		{"removed unknown", two, newOnly, nil, "1 removed -", []string{"QUIC config 1 removed, and whether its IDs are still in use is not known"}},
		{"key of one changed", two, rekeyed, nil, "2 changed -", []string{"table q: QUIC config 2 key changed"}},
		{"ID in one changed", two, moved, nil, "", []string{"table q: backend 10.50.0.11's server ID in config 2 changed (aa0001 -> aa0009)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, _ := CompareAt(Base{Tables: []*Table{c.old}, QUICUse: c.use}, []*Table{c.new})
			safe, reasons := Verdict(d)
			if safe != (len(c.want) == 0) || len(reasons) != len(c.want) {
				t.Fatalf("safe %v, reasons %q; want %d", safe, reasons, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(reasons[i], w) {
					t.Errorf("reason %d %q does not say %q", i, reasons[i], w)
				}
			}
			var got []string
			for _, qc := range d.Tables[0].QUICConfigs {
				r := "-"
				if qc.Recent != nil {
					r = fmt.Sprint(*qc.Recent)
				}
				got = append(got, fmt.Sprintf("%d %s %s", qc.ConfigID, qc.Change, r))
			}
			if g := strings.Join(got, ", "); g != c.changes {
				t.Errorf("configs changed %q, want %q", g, c.changes)
			}
			// What a config holds is in the fingerprint and the input
			// digest, keys included.
			if td := d.Tables[0]; td.Status != StatusChanged || td.OldFingerprint == td.NewFingerprint {
				t.Errorf("status %s, fingerprints %s and %s", td.Status, td.OldFingerprint, td.NewFingerprint)
			}
		})
	}
}
