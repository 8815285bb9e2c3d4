package config

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/director/director/table"
)

// quic reads a table's "quic" block (QUIC-LB routing): config_id 0-6,
// server_id_len 1-15, nonce_len 4 and up, the whole ID at most 20 bytes;
// and, for encrypted IDs, a "key" of 32 hex digits (a secret).
func (p *parser) quic(path string, v *jsonValue) table.QUIC {
	if !p.object(path, v, "config_id", "server_id_len", "nonce_len", "key") {
		return table.QUIC{}
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
	q := table.QUIC{ConfigID: c, ServerIDLen: l, NonceLen: n}
	if v.get("key") != nil {
		q.Key, q.Encrypted = p.key(path, v, "key"), true
	}
	if len(p.errs) != before {
		return table.QUIC{}
	}
	return q
}

// serverIDs reads the backends' "server_id"s: each backend of a table with
// a quic block has one of server_id_len bytes, unique in the table; a
// table without one has none. And a quic block needs a UDP bind.
func (p *parser) serverIDs(path string, tv, bv *jsonValue, t *table.TableConfig) {
	qv := tv.get("quic")
	if qv != nil && len(t.Binds) > 0 && !slices.ContainsFunc(t.Binds, func(b table.Bind) bool { return b.Proto == table.ProtoUDP }) {
		p.fail(path+".quic", "the table has no UDP bind: QUIC-LB routing reads UDP packets only")
	}
	seen := map[table.ServerID]int{}
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
		case sv.kind != jsonString:
			p.fail(bp, "%s is not a string of hex digits", sv.brief())
			continue
		}
		raw, err := hex.DecodeString(sv.str)
		if err != nil {
			p.fail(bp, "%s is not hex", sv.brief())
			continue
		}
		if t.QUIC.On() && len(raw) != int(t.QUIC.ServerIDLen) {
			p.fail(bp, "%s is %d bytes; the table's server_id_len is %d", sv.brief(), len(raw), t.QUIC.ServerIDLen)
			continue
		}
		id := table.ServerID(raw)
		if j, dup := seen[id]; dup {
			p.fail(bp, "%s is also %s.backends[%d].server_id", sv.brief(), path, j)
			continue
		}
		seen[id] = i
		if b != nil {
			b.ServerID = id
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
