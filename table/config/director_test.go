package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/director/director/table"
)

func TestParseDirectorConfig(t *testing.T) {
	c, err := ParseDirectorFile("../../testdata/configs/glb-director.conf")
	if err != nil {
		t.Fatal(err)
	}
	if c.GatewayMAC.String() != "02:00:00:00:00:03" || c.SrcIP.String() != "192.0.2.1" || !c.ForwardICMPEcho {
		t.Fatalf("parsed %+v", c)
	}
	if c.HashFields != table.HashSrcAddr || c.AltHashFields != table.HashSrcAddr|table.HashSrcPort {
		t.Fatalf("hash fields %v / %v", c.HashFields, c.AltHashFields)
	}
	if len(c.Warnings) != 3 || !strings.Contains(strings.Join(c.Warnings, "\n"), "lcores: ignored (used only by GLB's DPDK director)") {
		t.Fatalf("warnings %v", c.Warnings)
	}
	// Defaults: source address hashing, echo forwarding on, gateway resolved later.
	c, err = ParseDirector([]byte(`{"outbound_src_ip": "10.0.0.1"}`))
	if err != nil || c.HashFields != table.HashSrcAddr || c.AltHashFields != 0 || !c.ForwardICMPEcho || c.GatewayMAC != nil {
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
		`{"outbound_src_ip6": "fe80::1"}`:                                     `outbound_src_ip6: "fe80::1" is link-local`,
		`{"outbound_src_ip6": "ff02::1"}`:                                     `outbound_src_ip6: "ff02::1" is not a unicast address`,
		`{"outbound_src_ip6": "::"}`:                                          `outbound_src_ip6: "::" is not a unicast address`,
		`{"outbound_src_ip6": "10.0.0.1"}`:                                    `outbound_src_ip6: "10.0.0.1" is not IPv6`,
		`{"outbound_src_ip6": "::ffff:10.0.0.1"}`:                             `outbound_src_ip6: "::ffff:10.0.0.1" is not IPv6`,
		`{"outbound_src_ip6": "2001:db8::1", "outbound_gateway_mac6": "x"}`:   `outbound_gateway_mac6: "x" is not an Ethernet MAC address`,
	} {
		if _, err := ParseDirector([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", in, err, want)
		}
	}
}

// TestCompareDirectorConfig: each changed setting gets a verdict; a hash
// change is safe only along GLB's migration path.
func TestCompareDirectorConfig(t *testing.T) {
	parse := func(s string) *table.DirectorConfig {
		c, err := ParseDirector([]byte(`{"outbound_src_ip": "192.0.2.1", "outbound_gateway_mac": "02:00:00:00:00:03"` + s + `}`))
		if err != nil {
			t.Fatal(err)
		}
		// It survives the trip through a plan.
		raw, err := c.MarshalGLB()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseDirector(raw)
		if err != nil || len(table.CompareDirectorConfig(c, back)) != 0 {
			t.Fatalf("round trip of %s: %v %v", raw, err, table.CompareDirectorConfig(c, back))
		}
		return c
	}
	base := parse("")
	for _, c := range []struct {
		name, new string
		want      []string // setting:safe
	}{
		{"same", "", nil},
		{"rehash", `, "hash_fields": {"src_port": true}`, []string{"hash_fields:false"}},
		{"migration", `, "hash_fields": {"src_port": true}, "alt_hash_fields": {"src_addr": true}`, []string{"hash_fields:true", "alt_hash_fields:true"}},
		{"rehash, other alt", `, "hash_fields": {"src_port": true}, "alt_hash_fields": {"dst_port": true}`, []string{"hash_fields:false", "alt_hash_fields:true"}},
		{"alt added", `, "alt_hash_fields": {"src_port": true}`, []string{"alt_hash_fields:true"}},
		{"gateway", "", nil},
		{"source and echo", `, "forward_icmp_ping_responses": false`, []string{"forward_icmp_ping_responses:true"}},
	} {
		n := parse(c.new)
		if c.name == "gateway" {
			n.GatewayMAC[5] = 4
			c.want = []string{"outbound_gateway_mac:false"}
		}
		var got []string
		for _, ch := range table.CompareDirectorConfig(base, n) {
			got = append(got, fmt.Sprintf("%s:%v", ch.Setting, ch.Safe))
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// Ending a migration, and changing the alternate during one.
	mig := parse(`, "alt_hash_fields": {"src_port": true}`)
	if ch := table.CompareDirectorConfig(mig, base); len(ch) != 1 || !ch[0].Safe || !strings.Contains(ch[0].Reason, "ends a hash migration") {
		t.Errorf("alt removed: %+v", ch)
	}
	if ch := table.CompareDirectorConfig(mig, parse(`, "alt_hash_fields": {"dst_port": true}`)); len(ch) != 1 || ch[0].Safe {
		t.Errorf("alt changed: %+v", ch)
	}
	// Nothing live: every setting is new, and safe.
	if ch := table.CompareDirectorConfig(nil, base); len(ch) != 5 || !ch[1].Safe {
		t.Errorf("first config: %+v", ch)
	}
	// outbound_interface is read, and kept through a plan.
	c, err := ParseDirector([]byte(`{"outbound_src_ip": "192.0.2.1", "outbound_interface": "eth0"}`))
	if err != nil || c.OutboundInterface != "eth0" {
		t.Fatalf("outbound_interface: %+v %v", c, err)
	}
	if _, err := ParseDirector([]byte(`{"outbound_src_ip": "192.0.2.1", "outbound_interface": "a/b"}`)); err == nil ||
		!strings.Contains(err.Error(), "outbound_interface: \"a/b\" is not an interface name") {
		t.Errorf("bad interface: %v", err)
	}
}

// TestIPv6OnlyDirector: a director that sends GUE over IPv6 alone needs no
// outbound_src_ip; its settings survive the plan's round trip.
func TestIPv6OnlyDirector(t *testing.T) {
	c, err := ParseDirector([]byte(`{"outbound_src_ip6": "2001:db8::1", "outbound_gateway_mac": "02:00:00:00:00:03", "outbound_gateway_mac6": "02:00:00:00:00:66"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.SrcIP.IsValid() || c.SrcIP6.String() != "2001:db8::1" || c.Gateway6().String() != "02:00:00:00:00:66" {
		t.Fatalf("%+v", c)
	}
	data, err := c.MarshalGLB()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseDirector(data)
	if err != nil || again.SrcIP6 != c.SrcIP6 || again.Gateway6().String() != c.Gateway6().String() || again.SrcIP.IsValid() {
		t.Fatalf("round trip %s: %+v, %v", data, again, err)
	}
}
