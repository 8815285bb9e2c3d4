package config

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/director/director/table"
)

// qtbl is a one-table config with a UDP bind, the quic block q (none when
// empty) and the backends' server_id fields ids ("-" for none).
func qtbl(q string, ids ...string) string {
	var bs []string
	for i, id := range ids {
		b := `{"ip": "10.1.0.` + string(rune('1'+i)) + `", "state": "active", "healthy": true`
		if id != "-" {
			b += `, "server_id": ` + id
		}
		bs = append(bs, b+`}`)
	}
	quic := ""
	if q != "" {
		quic = `"quic": ` + q + `, `
	}
	return cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", ` + quic +
		`"binds": [{"ip": "10.0.0.1", "proto": "udp", "port": 443}], "backends": [` + strings.Join(bs, ", ") + `]}`)
}

func TestParseQUIC(t *testing.T) {
	c, err := Parse([]byte(qtbl(`{"config_id": 3, "server_id_len": 2, "nonce_len": 5}`, `"0a0b"`, `"ABCD"`)))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Tables[0]
	if tc.QUIC != (table.QUIC{QUICConfig: table.QUICConfig{ConfigID: 3, ServerIDLen: 2, NonceLen: 5}}) || tc.QUIC.CIDLen() != 8 {
		t.Errorf("quic = %+v", tc.QUIC)
	}
	if tc.Backends[0].ServerID != "\x0a\x0b" || tc.Backends[1].ServerID != "\xab\xcd" || tc.Backends[1].ServerID.String() != "abcd" {
		t.Errorf("server IDs %q %q", tc.Backends[0].ServerID, tc.Backends[1].ServerID)
	}
	// The longest ID the limits allow: 1 + 15 + 4.
	if _, err := Parse([]byte(qtbl(`{"config_id": 6, "server_id_len": 15, "nonce_len": 4}`, `"`+strings.Repeat("ab", 15)+`"`))); err != nil {
		t.Errorf("1 + 15 + 4: %v", err)
	}
	// Without a quic block, no server IDs and the zero QUIC.
	c, err = Parse([]byte(qtbl("", "-")))
	if err != nil || c.Tables[0].QUIC.On() || c.Tables[0].Backends[0].ServerID != "" {
		t.Errorf("no quic block: %v %+v", err, c)
	}
}

func TestParseQUICErrors(t *testing.T) {
	good := `{"config_id": 1, "server_id_len": 2, "nonce_len": 6}`
	for _, c := range []struct {
		name, in string
		want     string
	}{
		{"config 7", qtbl(`{"config_id": 7, "server_id_len": 2, "nonce_len": 6}`, `"0001"`),
			"tables[0].quic.config_id: 7 is not a config ID from 0 to 6"},
		{"config -1", qtbl(`{"config_id": -1, "server_id_len": 2, "nonce_len": 6}`, `"0001"`), "tables[0].quic.config_id: -1 is not"},
		{"server_id_len 0", qtbl(`{"config_id": 1, "server_id_len": 0, "nonce_len": 6}`, `"0001"`),
			"tables[0].quic.server_id_len: 0 is not a server ID length from 1 to 15"},
		{"server_id_len 16", qtbl(`{"config_id": 1, "server_id_len": 16, "nonce_len": 4}`, `"0001"`), "tables[0].quic.server_id_len: 16 is not"},
		{"nonce 3", qtbl(`{"config_id": 1, "server_id_len": 2, "nonce_len": 3}`, `"0001"`),
			"tables[0].quic.nonce_len: 3 is not a nonce length from 4"},
		{"too long", qtbl(`{"config_id": 1, "server_id_len": 10, "nonce_len": 10}`, `"0001"`),
			"tables[0].quic: 1 + server_id_len 10 + nonce_len 10 is 21 bytes: a QUIC connection ID is at most 20"},
		{"missing field", qtbl(`{"config_id": 1, "server_id_len": 2}`, `"0001"`), "tables[0].quic.nonce_len: missing"},
		{"unknown field", qtbl(`{"config_id": 1, "server_id_len": 2, "nonce_len": 6, "mode": "aes"}`, `"0001"`), "tables[0].quic.mode"},
		{"short key", qtbl(`{"config_id": 1, "server_id_len": 2, "nonce_len": 6, "key": "00"}`, `"0001"`),
			"tables[0].quic.key: must be exactly 32 hex digits, got 2 characters (value not shown: it is a secret)"},
		{"missing ID", qtbl(good, `"0001"`, "-"), "tables[0].backends[1].server_id: missing"},
		{"short ID", qtbl(good, `"01"`), `tables[0].backends[0].server_id: "01" is 1 bytes; the table's server_id_len is 2`},
		{"long ID", qtbl(good, `"010203"`), "tables[0].backends[0].server_id: \"010203\" is 3 bytes"},
		{"not hex", qtbl(good, `"zz01"`), `tables[0].backends[0].server_id: "zz01" is not hex`},
		{"not a string", qtbl(good, `1`), "tables[0].backends[0].server_id: 1 is not a string of hex digits"},
		{"duplicate", qtbl(good, `"0a0b"`, `"0c0d"`, `"0A0B"`), `tables[0].backends[2].server_id: "0A0B" is also tables[0].backends[0].server_id`},
		{"ID without quic", qtbl("", `"0a0b"`), "tables[0].backends[0].server_id: the table has no quic block"},
		{"no UDP bind", strings.Replace(qtbl(good, `"0a0b"`), `"proto": "udp"`, `"proto": "tcp"`, 1),
			"tables[0].quic: the table has no UDP bind: QUIC-LB routing reads UDP packets only"},
		// Config rotation: a list of configs.
		{"empty list", qtbl(`[]`, `"0001"`), "tables[0].quic: an empty list: give at least one config, or leave quic out"},
		{"same config twice", qtbl(`[`+good+`, {"config_id": 1, "server_id_len": 3, "nonce_len": 6}]`, `"0001"`),
			"tables[0].quic[1].config_id: 1 is also tables[0].quic[0].config_id"},
		{"eight configs", qtbl(`[`+strings.Repeat(good+`, `, 7)+good+`]`, `"0001"`), "tables[0].quic: 8 configs: a table has at most 7"},
		{"bad config in list", qtbl(`[`+good+`, {"config_id": 7, "server_id_len": 2, "nonce_len": 6}]`, `"0001"`),
			"tables[0].quic[1].config_id: 7 is not a config ID"},
		{"one string, two lengths", qtbl(`[`+good+`, {"config_id": 2, "server_id_len": 3, "nonce_len": 6}]`, `"0001"`),
			`tables[0].backends[0].server_id: "0001" is 2 bytes; config 2's server_id_len is 3`},
		{"config missing from object", qtbl(`[`+good+`, {"config_id": 2, "server_id_len": 3, "nonce_len": 6}]`, `{"1": "0001"}`),
			"tables[0].backends[0].server_id.2: missing: the backend needs a server ID in each of the table's configs"},
		{"unknown config in object", qtbl(`[`+good+`]`, `{"1": "0001", "3": "0002"}`), "tables[0].backends[0].server_id.3"},
		{"duplicate in one config", qtbl(`[`+good+`, {"config_id": 2, "server_id_len": 2, "nonce_len": 6}]`, `{"1": "0001", "2": "0a0b"}`, `{"1": "0002", "2": "0A0B"}`),
			`tables[0].backends[1].server_id.2: "0A0B" is also tables[0].backends[0]'s server ID in config 2`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.in))
			if err == nil {
				t.Fatalf("accepted %s", c.in)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

// TestParseQUICRotation: a list of configs, in any order, reads as the
// configs in increasing config ID, each backend's IDs with theirs; a
// string server_id is the backend's ID in every config; the same ID may
// serve in two configs.
func TestParseQUICRotation(t *testing.T) {
	c, err := Parse([]byte(qtbl(`[{"config_id": 4, "server_id_len": 3, "nonce_len": 6, "key": "00112233445566778899aabbccddeeff"},
	  {"config_id": 1, "server_id_len": 2, "nonce_len": 6}, {"config_id": 0, "server_id_len": 2, "nonce_len": 5}]`,
		`{"4": "aa0001", "1": "0001", "0": "0001"}`, `{"0": "0002", "1": "0002", "4": "aa0002"}`)))
	if err != nil {
		t.Fatal(err)
	}
	q := c.Tables[0].QUIC
	cs := q.Configs()
	if len(cs) != 3 || cs[0].ConfigID != 0 || cs[1].ConfigID != 1 || cs[2].ConfigID != 4 || !cs[2].Encrypted || cs[0].NonceLen != 5 {
		t.Fatalf("configs %v", cs)
	}
	b := c.Tables[0].Backends[1]
	if b.ServerIDIn(0) != "\x00\x02" || b.ServerIDIn(1) != "\x00\x02" || b.ServerIDIn(2) != "\xaa\x00\x02" {
		t.Errorf("backend 1's IDs %q, %q", b.ServerID, b.MoreServerIDs)
	}
	if got := q.ServerIDsOf(b); got != "0:0002 1:0002 4:aa0002" {
		t.Errorf("ServerIDsOf = %q", got)
	}
	if s := q.String(); strings.Contains(s, "0011") || !strings.Contains(s, "config 4, 3-byte server IDs, 6-byte nonces, encrypted") {
		t.Errorf("String = %q", s)
	}
	js, err := json.Marshal(q)
	if err != nil || strings.Contains(string(js), "0011") || !strings.HasPrefix(string(js), `[{"config_id":0,`) {
		t.Errorf("JSON %s, %v", js, err)
	}
	var back table.QUIC
	if err := json.Unmarshal(js, &back); err != nil || back.String() != q.String() {
		t.Errorf("read back %v from %s: %v", back, js, err)
	}
	// One string for every config of its length.
	c, err = Parse([]byte(qtbl(`[{"config_id": 2, "server_id_len": 2, "nonce_len": 6}, {"config_id": 1, "server_id_len": 2, "nonce_len": 6}]`, `"0a0b"`, `"0c0d"`)))
	if err != nil {
		t.Fatal(err)
	}
	if b := c.Tables[0].Backends[0]; b.ServerIDIn(0) != "\x0a\x0b" || b.ServerIDIn(1) != "\x0a\x0b" {
		t.Errorf("one string: IDs %q, %q", b.ServerID, b.MoreServerIDs)
	}
	// The single-object form is one config, and so is a list of one.
	c1, err1 := Parse([]byte(qtbl(`{"config_id": 1, "server_id_len": 2, "nonce_len": 6}`, `"0a0b"`)))
	c2, err2 := Parse([]byte(qtbl(`[{"config_id": 1, "server_id_len": 2, "nonce_len": 6}]`, `{"1": "0a0b"}`)))
	if err1 != nil || err2 != nil || c1.Tables[0].QUIC != c2.Tables[0].QUIC || c1.Tables[0].Backends[0] != c2.Tables[0].Backends[0] {
		t.Errorf("object and list of one differ: %v %v", err1, err2)
	}
}

// TestParseQUICKey: a quic block's key makes its IDs encrypted; the key
// is read, and never shown: not by String, not in JSON, not in an error
// about it; the fingerprint covers it.
func TestParseQUICKey(t *testing.T) {
	const key = "8f95f09245765f80256934e50c66207f"
	block := func(k string) string {
		return `{"config_id": 1, "server_id_len": 3, "nonce_len": 4, "key": "` + k + `"}`
	}
	c, err := Parse([]byte(qtbl(block(key), `"ed793a"`)))
	if err != nil {
		t.Fatal(err)
	}
	q := c.Tables[0].QUIC
	if !q.Encrypted || q.Key[0] != 0x8f || q.Key[15] != 0x7f {
		t.Fatalf("quic = %v, encrypted %v", q, q.Encrypted)
	}
	js, _ := json.Marshal(q)
	for _, shown := range []string{q.String(), string(js)} {
		if strings.Contains(shown, key) || strings.Contains(strings.ToLower(shown), "8f95") {
			t.Errorf("the key is shown: %s", shown)
		}
	}
	if !strings.Contains(q.String(), "encrypted") || !strings.Contains(string(js), `"encrypted":true`) {
		t.Errorf("not said to be encrypted: %s, %s", q, js)
	}
	other := strings.Replace(key, "8f", "9f", 1)
	c2, err := Parse([]byte(qtbl(block(other), `"ed793a"`)))
	if err != nil {
		t.Fatal(err)
	}
	t1, err := table.Build(&c.Tables[0])
	if err != nil {
		t.Fatal(err)
	}
	t2, err := table.Build(&c2.Tables[0])
	if err != nil {
		t.Fatal(err)
	}
	if table.Fingerprint(t1) == table.Fingerprint(t2) {
		t.Error("two keys, one fingerprint")
	}
	bad := "zz" + key[2:]
	_, err = Parse([]byte(qtbl(block(bad), `"ed793a"`)))
	if err == nil || !strings.Contains(err.Error(), "tables[0].quic.key: ") || strings.Contains(err.Error(), bad) {
		t.Errorf("a bad key: %v", err)
	}
}
