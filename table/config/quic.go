package config

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/director/director/table"
)

// quic reads a table's "quic": one config (an object), or a list of up to
// seven with distinct config IDs, for config rotation.
func (p *parser) quic(path string, v *jsonValue) table.QUIC {
	if v.kind != jsonArray {
		return table.QUIC{QUICConfig: p.quicConfig(path, v)}
	}
	if len(v.elems) == 0 {
		p.fail(path, "an empty list: give at least one config, or leave quic out")
		return table.QUIC{}
	}
	if len(v.elems) > table.MaxQUICConfigID+1 {
		p.fail(path, "%d configs: a table has at most %d (config IDs 0 to %d)", len(v.elems), table.MaxQUICConfigID+1, table.MaxQUICConfigID)
		return table.QUIC{}
	}
	var q table.QUIC
	before := len(p.errs)
	seen := map[uint8]int{}
	for i, e := range v.elems {
		ep := fmt.Sprintf("%s[%d]", path, i)
		c := p.quicConfig(ep, e)
		if !c.On() {
			continue
		}
		if j, dup := seen[c.ConfigID]; dup {
			p.fail(ep+".config_id", "%d is also %s[%d].config_id: each config of a table has its own", c.ConfigID, path, j)
			continue
		}
		seen[c.ConfigID] = i
		if i == 0 {
			q.QUICConfig = c
		} else {
			q.More[i-1] = c
		}
	}
	if len(p.errs) != before {
		return table.QUIC{}
	}
	return q
}

// quicConfig reads one QUIC-LB config: config_id 0-6, server_id_len
// 1-15, nonce_len 4 and up, the whole ID at most 20 bytes; and, for
// encrypted IDs, a "key" of 32 hex digits (a secret).
func (p *parser) quicConfig(path string, v *jsonValue) table.QUICConfig {
	if !p.object(path, v, "config_id", "server_id_len", "nonce_len", "key") {
		return table.QUICConfig{}
	}
	num := func(key string, lo, hi int, what string) (uint8, bool) {
		f := p.required(path, v, key, jsonNumber)
		if f == nil {
			return 0, false
		}
		n, err := strconv.ParseInt(f.num.String(), 10, 64)
		if err != nil || n < int64(lo) || n > int64(hi) {
			p.fail(join(path, key), "%s is not %s", f.brief(), what)
			return 0, false
		}
		return uint8(n), true
	}
	before := len(p.errs)
	c, _ := num("config_id", 0, table.MaxQUICConfigID, fmt.Sprintf("a config ID from 0 to %d (7, 0b111, marks IDs not to route by)", table.MaxQUICConfigID))
	l, okL := num("server_id_len", 1, table.MaxServerIDLen, fmt.Sprintf("a server ID length from 1 to %d bytes", table.MaxServerIDLen))
	n, okN := num("nonce_len", table.MinNonceLen, table.MaxCIDLen-2, fmt.Sprintf("a nonce length from %d to %d bytes", table.MinNonceLen, table.MaxCIDLen-2))
	if okL && okN && 1+int(l)+int(n) > table.MaxCIDLen {
		p.fail(path, "1 + server_id_len %d + nonce_len %d is %d bytes: a QUIC connection ID is at most %d", l, n, 1+int(l)+int(n), table.MaxCIDLen)
	}
	q := table.QUICConfig{ConfigID: c, ServerIDLen: l, NonceLen: n}
	if v.get("key") != nil {
		q.Key, q.Encrypted = p.key(path, v, "key"), true
	}
	if len(p.errs) != before {
		return table.QUICConfig{}
	}
	return q
}

// serverIDs reads the backends' "server_id"s: each backend of a table with
// a quic block has one in each config, unique in the config: a string of
// hex digits, its ID in every config (of one length), or an object that
// gives it per config, by config ID ({"1": "0a0b", "2": "0a0b0c"}). A
// table without a quic block has none. And a quic block needs a UDP bind.
func (p *parser) serverIDs(path string, tv, bv *jsonValue, t *table.TableConfig) {
	qv := tv.get("quic")
	if qv != nil && len(t.Binds) > 0 && !slices.ContainsFunc(t.Binds, func(b table.Bind) bool { return b.Proto == table.ProtoUDP }) {
		p.fail(path+".quic", "the table has no UDP bind: QUIC-LB routing reads UDP packets only")
	}
	configs := t.QUIC.Configs()
	seen := make([]map[table.ServerID]int, len(configs))
	for i := range seen {
		seen[i] = map[table.ServerID]int{}
	}
	k := 0 // t.Backends[k] is the next that parsed
	for i, e := range bv.elems {
		bp := fmt.Sprintf("%s.backends[%d].server_id", path, i)
		sv := e.get("server_id")
		if e.kind != jsonObject {
			continue
		}
		var b *table.Backend
		if k < len(t.Backends) && t.Backends[k].IP.String() == ipOf(e) {
			b = &t.Backends[k]
			k++
		}
		switch {
		case qv == nil && sv != nil:
			p.fail(bp, "the table has no quic block: a server ID means nothing without it")
			continue
		case qv == nil:
			continue
		case sv == nil:
			p.fail(bp, "missing: every backend of a table with a quic block needs its QUIC-LB server ID")
			continue
		case sv.kind != jsonString && sv.kind != jsonObject:
			p.fail(bp, "%s is not a string of hex digits (or an object of them by config ID)", sv.brief())
			continue
		}
		if len(configs) == 0 {
			continue // the quic block's own errors say why
		}
		if sv.kind == jsonObject {
			var allowed []string
			for _, c := range configs {
				allowed = append(allowed, strconv.Itoa(int(c.ConfigID)))
			}
			if !p.object(bp, sv, allowed...) {
				continue
			}
		}
		for ci, c := range configs {
			at, v := bp, sv
			if sv.kind == jsonObject {
				key := strconv.Itoa(int(c.ConfigID))
				at, v = join(bp, key), sv.get(key)
				if v == nil {
					p.fail(at, "missing: the backend needs a server ID in each of the table's configs")
					continue
				}
				if v.kind != jsonString {
					p.fail(at, "%s is not a string of hex digits", v.brief())
					continue
				}
			}
			raw, err := hex.DecodeString(v.str)
			if err != nil {
				p.fail(at, "%s is not hex", v.brief())
				if sv.kind == jsonString {
					break // once for the string every config takes
				}
				continue
			}
			if len(raw) != int(c.ServerIDLen) {
				if len(configs) == 1 {
					p.fail(at, "%s is %d bytes; the table's server_id_len is %d", v.brief(), len(raw), c.ServerIDLen)
				} else {
					p.fail(at, "%s is %d bytes; config %d's server_id_len is %d", v.brief(), len(raw), c.ConfigID, c.ServerIDLen)
				}
				continue
			}
			id := table.ServerID(raw)
			if j, dup := seen[ci][id]; dup {
				if len(configs) == 1 {
					p.fail(at, "%s is also %s.backends[%d].server_id", v.brief(), path, j)
				} else {
					p.fail(at, "%s is also %s.backends[%d]'s server ID in config %d", v.brief(), path, j, c.ConfigID)
				}
				continue
			}
			seen[ci][id] = i
			if b != nil {
				b.SetServerIDIn(ci, id)
			}
		}
	}
}

// ipOf is the "ip" string of a backend's object, "" when it has none.
func ipOf(v *jsonValue) string {
	if f := v.get("ip"); f != nil && f.kind == jsonString {
		if a, err := netip.ParseAddr(f.str); err == nil {
			return a.String()
		}
	}
	return ""
}
