package config

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/director/director/table"
)

func TestParseBGP(t *testing.T) {
	c, err := ParseDirector([]byte(`{"outbound_src_ip": "10.0.0.1", "bgp": {"asn": 65001, "router_id": "10.78.0.2",
	  "peers": [{"address": "10.78.0.1", "asn": 65000}, {"address": "fd00::1", "asn": 65000, "port": 1179, "password": "s3cret-pass"}],
	  "hold_time_s": 3, "drain_s": 1, "withdraw_when_down": false}}`))
	if err != nil {
		t.Fatal(err)
	}
	b := c.BGP
	if b.ASN != 65001 || b.RouterID != netip.MustParseAddr("10.78.0.2") || len(b.Peers) != 2 || b.HoldTime != 3*time.Second ||
		b.Drain != time.Second || b.ConnectRetry != table.DefaultConnectRetry || b.WithdrawWhenDown || b.NextHop.IsValid() {
		t.Fatalf("%+v", b)
	}
	if p := b.Peers[0]; p.Port != 179 || p.Password != "" || p.ASN != 65000 {
		t.Errorf("defaults: %+v", p)
	}
	if p := b.Peers[1]; p.Port != 1179 || p.Password != "s3cret-pass" {
		t.Errorf("%+v", p)
	}
	if s := fmt.Sprintf("%v %+v %#v", b, b.Peers, b.Peers[1]); strings.Contains(s, "s3cret") {
		t.Errorf("the password formats: %s", s)
	}
	d, _ := ParseDirector([]byte(`{"outbound_src_ip": "10.0.0.1", "bgp": {"asn": 1, "router_id": "1.2.3.4", "peers": [{"address": "1.2.3.5", "asn": 2}]}}`))
	if d.BGP.HoldTime != table.DefaultHoldTime || d.BGP.Drain != table.DefaultDrain || !d.BGP.WithdrawWhenDown {
		t.Errorf("defaults: %+v", d.BGP)
	}
}

func TestBGPErrorsNameThePlace(t *testing.T) {
	for _, c := range []struct{ bgp, want string }{
		{`{"router_id": "1.2.3.4", "peers": []}`, "bgp.asn: missing"},
		{`{"asn": 0, "router_id": "1.2.3.4", "peers": [{"address": "1.1.1.1", "asn": 1}]}`, "bgp.asn: 0 is not an AS number"},
		{`{"asn": 1, "router_id": "::1", "peers": [{"address": "1.1.1.1", "asn": 1}]}`, `bgp.router_id: "::1" is not an IPv4 address`},
		{`{"asn": 1, "router_id": "1.2.3.4", "peers": []}`, "bgp.peers: empty"},
		{`{"asn": 1, "router_id": "1.2.3.4", "peers": [{"address": "1.1.1.1", "asn": 1}, {"address": "1.1.1.1", "asn": 2}]}`, "bgp.peers[1].address: 1.1.1.1 is also peers[0]"},
		{`{"asn": 1, "router_id": "1.2.3.4", "peers": [{"address": "1.1.1.1", "asn": 1, "port": 0}]}`, "bgp.peers[0].port: 0 is not a port"},
		{`{"asn": 1, "router_id": "1.2.3.4", "peers": [{"address": "nope", "asn": 1}]}`, `bgp.peers[0].address: "nope" is not a peer's IP address`},
		{`{"asn": 1, "router_id": "1.2.3.4", "peers": [{"address": "1.1.1.1"}]}`, "bgp.peers[0].asn: missing"},
		{`{"asn": 1, "router_id": "1.2.3.4", "peers": [{"address": "1.1.1.1", "asn": 1, "colour": 1}]}`, "bgp.peers[0].colour: unknown"},
		{`{"asn": 1, "router_id": "1.2.3.4", "hold_time_s": 2, "peers": [{"address": "1.1.1.1", "asn": 1}]}`, "bgp.hold_time_s: 2 is neither 0 nor at least 3"},
		{`{"asn": 1, "router_id": "1.2.3.4", "drain_s": -1, "peers": [{"address": "1.1.1.1", "asn": 1}]}`, "bgp.drain_s: -1 is not a whole number of seconds"},
		{`{"asn": 1, "router_id": "1.2.3.4", "peers": [{"address": "1.1.1.1", "asn": 1, "password": 123456789}]}`, "bgp.peers[0].password: is a number, not a string (value not shown"},
		{`{"asn": 1, "router_id": "1.2.3.4", "peers": [{"address": "1.1.1.1", "asn": 1, "password": "` + strings.Repeat("x", 81) + `"}]}`, "bgp.peers[0].password: is 81 bytes"},
	} {
		_, err := ParseDirector([]byte(`{"outbound_src_ip": "10.0.0.1", "bgp": ` + c.bgp + `}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.bgp, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "123456789") || strings.Contains(err.Error(), "xxxx")) {
			t.Errorf("a password is echoed: %v", err)
		}
	}
}
