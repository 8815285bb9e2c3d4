package table

import (
	"strings"
	"testing"
)

func TestParseDirectorConfig(t *testing.T) {
	c, err := LoadDirectorConfig("../testdata/configs/glb-director.conf")
	if err != nil {
		t.Fatal(err)
	}
	if c.GatewayMAC.String() != "02:00:00:00:00:03" || c.SrcIP.String() != "192.0.2.1" || !c.ForwardICMPEcho {
		t.Fatalf("parsed %+v", c)
	}
	if c.HashFields != HashSrcAddr || c.AltHashFields != HashSrcAddr|HashSrcPort {
		t.Fatalf("hash fields %v / %v", c.HashFields, c.AltHashFields)
	}
	if len(c.Warnings) != 3 || !strings.Contains(strings.Join(c.Warnings, "\n"), "lcores: ignored (used only by GLB's DPDK director)") {
		t.Fatalf("warnings %v", c.Warnings)
	}
	// Defaults: source address hashing, echo forwarding on, gateway resolved later.
	c, err = ParseDirectorConfig([]byte(`{"outbound_src_ip": "10.0.0.1"}`))
	if err != nil || c.HashFields != HashSrcAddr || c.AltHashFields != 0 || !c.ForwardICMPEcho || c.GatewayMAC != nil {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for in, want := range map[string]string{
		`{}`:                             "outbound_src_ip: missing",
		`{"outbound_src_ip": "fd00::1"}`: "is not an IPv4 address",
		`{"outbound_src_ip": "10.0.0.1", "outbound_gateway_mac": "nope"}`:     `outbound_gateway_mac: "nope" is not an Ethernet MAC address`,
		`{"outbound_src_ip": "10.0.0.1", "hash_fields": {"src_addr": false}}`: "hash_fields: must enable at least one field",
		`{"outbound_src_ip": "10.0.0.1", "hash_fields": {"src_ip": true}}`:    "hash_fields.src_ip: unknown field",
		`{"outbound_src_ip": "10.0.0.1", "forward_icmp_ping_responses": 1}`:   "forward_icmp_ping_responses: 1 is not true or false",
		`{"outbound_src_ip": "10.0.0.1", "statsd": 1}`:                        "statsd: unknown field",
	} {
		if _, err := ParseDirectorConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", in, err, want)
		}
	}
}
