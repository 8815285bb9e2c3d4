package config

import (
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
	if tc.QUIC != (table.QUIC{ConfigID: 3, ServerIDLen: 2, NonceLen: 5}) || tc.QUIC.CIDLen() != 8 {
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
		{"unknown field", qtbl(`{"config_id": 1, "server_id_len": 2, "nonce_len": 6, "key": "00"}`, `"0001"`), "tables[0].quic.key"},
		{"missing ID", qtbl(good, `"0001"`, "-"), "tables[0].backends[1].server_id: missing"},
		{"short ID", qtbl(good, `"01"`), `tables[0].backends[0].server_id: "01" is 1 bytes; the table's server_id_len is 2`},
		{"long ID", qtbl(good, `"010203"`), "tables[0].backends[0].server_id: \"010203\" is 3 bytes"},
		{"not hex", qtbl(good, `"zz01"`), `tables[0].backends[0].server_id: "zz01" is not hex`},
		{"not a string", qtbl(good, `1`), "tables[0].backends[0].server_id: 1 is not a string of hex digits"},
		{"duplicate", qtbl(good, `"0a0b"`, `"0c0d"`, `"0A0B"`), `tables[0].backends[2].server_id: "0A0B" is also tables[0].backends[0].server_id`},
		{"ID without quic", qtbl("", `"0a0b"`), "tables[0].backends[0].server_id: the table has no quic block"},
		{"no UDP bind", strings.Replace(qtbl(good, `"0a0b"`), `"proto": "udp"`, `"proto": "tcp"`, 1),
			"tables[0].quic: the table has no UDP bind: QUIC-LB routing reads UDP packets only"},
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
