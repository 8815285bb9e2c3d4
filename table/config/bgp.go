package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/director/director/table"
)

func (p *parser) bgp(path string, v *jsonValue) *table.BGP {
	b := &table.BGP{HoldTime: table.DefaultHoldTime, Drain: table.DefaultDrain, ConnectRetry: table.DefaultConnectRetry, WithdrawWhenDown: true}
	if !p.object(path, v, "asn", "router_id", "peers", "hold_time_s", "drain_s", "connect_retry_s", "next_hop", "withdraw_when_down") {
		return nil
	}
	if f := p.required(path, v, "asn", jsonNumber); f != nil {
		b.ASN = p.asn(join(path, "asn"), f)
	}
	if f := p.required(path, v, "router_id", jsonString); f != nil {
		if a, err := netip.ParseAddr(f.str); err != nil || !a.Is4() || a.IsUnspecified() {
			p.fail(join(path, "router_id"), "%s is not an IPv4 address (a BGP identifier is one)", f.brief())
		} else {
			b.RouterID = a
		}
	}
	seconds := func(key string, lo, hi int64, d *time.Duration) {
		f := v.get(key)
		if f == nil {
			return
		}
		n, err := strconv.ParseInt(f.num.String(), 10, 64)
		if f.kind != jsonNumber || err != nil || n < lo || n > hi {
			p.fail(join(path, key), "%s is not a whole number of seconds from %d to %d", f.brief(), lo, hi)
			return
		}
		*d = time.Duration(n) * time.Second
	}
	seconds("hold_time_s", 0, 65535, &b.HoldTime)
	if b.HoldTime > 0 && b.HoldTime < 3*time.Second {
		p.fail(join(path, "hold_time_s"), "%d is neither 0 nor at least 3 (RFC 4271)", int(b.HoldTime.Seconds()))
	}
	seconds("drain_s", 0, 3600, &b.Drain)
	seconds("connect_retry_s", 1, 3600, &b.ConnectRetry)
	if f := v.get("next_hop"); f != nil {
		if a, err := netip.ParseAddr(f.str); f.kind != jsonString || err != nil || a.IsUnspecified() {
			p.fail(join(path, "next_hop"), "%s is not an IP address", f.brief())
		} else {
			b.NextHop = a
		}
	}
	if f := v.get("withdraw_when_down"); f != nil {
		if f.kind != jsonBool {
			p.fail(join(path, "withdraw_when_down"), "%s is not true or false", f.brief())
		} else {
			b.WithdrawWhenDown = f.boolean
		}
	}
	if f := p.required(path, v, "peers", jsonArray); f != nil {
		if len(f.elems) == 0 {
			p.fail(join(path, "peers"), "empty: announcing needs at least one peer")
		}
		seen := map[netip.Addr]int{}
		for i, e := range f.elems {
			pp := fmt.Sprintf("%s[%d]", join(path, "peers"), i)
			peer, ok := p.bgpPeer(pp, e)
			if !ok {
				continue
			}
			if j, dup := seen[peer.Address]; dup {
				p.fail(join(pp, "address"), "%s is also peers[%d]", peer.Address, j)
				continue
			}
			seen[peer.Address] = i
			b.Peers = append(b.Peers, peer)
		}
	}
	return b
}

func (p *parser) asn(path string, f *jsonValue) uint32 {
	n, err := strconv.ParseInt(f.num.String(), 10, 64)
	if f.kind != jsonNumber || err != nil || n < 1 || n > 4294967294 {
		p.fail(path, "%s is not an AS number (1-4294967294)", f.brief())
		return 0
	}
	return uint32(n)
}

func (p *parser) bgpPeer(path string, v *jsonValue) (table.BGPPeer, bool) {
	peer := table.BGPPeer{Port: 179}
	if !p.object(path, v, "address", "asn", "port", "password") {
		return peer, false
	}
	ok := true
	if f := p.required(path, v, "address", jsonString); f != nil {
		a, err := netip.ParseAddr(f.str)
		if err != nil || a.IsUnspecified() || a.IsMulticast() {
			p.fail(join(path, "address"), "%s is not a peer's IP address", f.brief())
			ok = false
		}
		peer.Address = a
	} else {
		ok = false
	}
	if f := p.required(path, v, "asn", jsonNumber); f != nil {
		if peer.ASN = p.asn(join(path, "asn"), f); peer.ASN == 0 {
			ok = false
		}
	} else {
		ok = false
	}
	if f := v.get("port"); f != nil {
		if n, good := p.port(join(path, "port"), f); !good || n == 0 {
			if good {
				p.fail(join(path, "port"), "0 is not a port")
			}
			ok = false
		} else {
			peer.Port = n
		}
	}
	if f := v.get("password"); f != nil {
		// Never echo it: the message names its type or length, not its value.
		switch {
		case f.kind != jsonString:
			p.fail(join(path, "password"), "is %s, not a string (value not shown: it is a secret)", f.kind)
			ok = false
		case len(f.str) == 0 || len(f.str) > 80:
			p.fail(join(path, "password"), "is %d bytes: TCP MD5 keys are 1 to 80 (value not shown: it is a secret)", len(f.str))
			ok = false
		default:
			peer.Password = table.Secret(f.str)
		}
	}
	return peer, ok
}
