package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/director/director/table"
)

// ParseFile reads and validates a config file of at most MaxTables tables.
func ParseFile(path string) (*table.Config, error) {
	data, err := readFileMax(path, int64(MaxJSONBytes(table.ToolLimit)), "a JSON config")
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, InFile(path, err)
	}
	return c, nil
}

// Parse parses and validates a GLB forwarding-table config of at most
// MaxTables tables. The error, if any, is an ErrorList naming every problem
// with its JSON path.
func Parse(data []byte) (*table.Config, error) { return ParseLimit(data, table.ToolLimit) }

// ParseLimit is Parse for a reader that holds at most
// lim.Tables tables: a config with more is refused before any table is
// read.
func ParseLimit(data []byte, lim table.Limit) (*table.Config, error) {
	if max := MaxJSONBytes(lim); len(data) > max {
		return nil, table.ErrorList{{Msg: fmt.Sprintf("%d bytes; a JSON config may be at most %d bytes", len(data), max)}}
	}
	root, err := parseJSON(data)
	if err != nil {
		return nil, table.ErrorList{{Msg: "invalid JSON: " + err.Error()}}
	}
	p := &parser{lim: lim}
	c := p.config(root)
	// Every problem at once: the binds that parsed are checked for
	// overlaps even when others did not parse, named where they stand.
	binds := make([][]table.Bind, len(c.Tables))
	for i := range c.Tables {
		binds[i] = c.Tables[i].Binds
	}
	p.errs = append(p.errs, table.CheckBindOverlapsAt(binds, p.bindIdx)...)
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	c.Warnings = p.warns
	return c, nil
}

type parser struct {
	errs  table.ErrorList
	warns []string
	lim   table.Limit
	// bindIdx[t] are where table t's parsed binds stood in the file.
	bindIdx [][]int
}

func (p *parser) fail(path, format string, args ...any) {
	p.errs = append(p.errs, &table.FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// object checks that v is an object with only the allowed keys, each once.
func (p *parser) object(path string, v *jsonValue, allowed ...string) bool {
	if v.kind != jsonObject {
		p.fail(path, "%s is not an object", v.brief())
		return false
	}
	for _, d := range v.dups {
		p.fail(join(path, d), "appears more than once")
	}
outer:
	for _, m := range v.members {
		for _, a := range allowed {
			if m.key == a {
				continue outer
			}
		}
		p.fail(join(path, m.key), "unknown field (allowed: %s)", strings.Join(allowed, ", "))
	}
	return true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (p *parser) required(path string, v *jsonValue, key string, kind jsonKind) *jsonValue {
	f := v.get(key)
	if f == nil {
		p.fail(join(path, key), "missing")
		return nil
	}
	if f.kind != kind {
		p.fail(join(path, key), "%s is not %s", f.brief(), kind)
		return nil
	}
	return f
}

func (p *parser) config(root *jsonValue) *table.Config {
	c := &table.Config{Checks: table.DefaultCheckSettings()}
	// A director config given where a forwarding-table config goes: one
	// line that says so, not a line per key.
	if root.kind == jsonObject && root.get("tables") == nil &&
		(root.get("outbound_src_ip") != nil || root.get("outbound_gateway_mac") != nil || root.get("hash_fields") != nil) {
		p.fail("", "this is a director config (director.conf), not a forwarding-table config: give it with --director-config FILE, and the tables' config in its place")
		return c
	}
	if !p.object("", root, "tables", "healthchecks") {
		return c
	}
	if hc := root.get("healthchecks"); hc != nil {
		c.Checks = p.checkSettings("healthchecks", hc)
	}
	tables := p.required("", root, "tables", jsonArray)
	if tables == nil {
		return c
	}
	if len(tables.elems) == 0 {
		// GLB's packaged default: a director with nothing to serve yet.
		p.warns = append(p.warns, "tables: empty: there is nothing to steer, and a director serving this passes every packet")
	}
	if err := p.lim.Check(int64(len(tables.elems))); err != nil {
		p.errs = append(p.errs, err.(*table.FieldError))
		return c
	}
	names := map[string]int{}
	for i, tv := range tables.elems {
		path := fmt.Sprintf("tables[%d]", i)
		t := p.table(path, tv)
		if t.Name != "" {
			if j, dup := names[t.Name]; dup {
				p.fail(path+".name", "%q is already the name of tables[%d]", t.Name, j)
			}
			names[t.Name] = i
		}
		c.Tables = append(c.Tables, t)
	}
	return c
}

// balance reads a balance factor: 1.0 to 2.0, in steps of 0.001.
func (p *parser) balance(path string, v *jsonValue) uint16 {
	f, err := strconv.ParseFloat(v.num.String(), 64)
	if v.kind != jsonNumber || err != nil || f < 1 || f > 2 {
		p.fail(path, "%s is not a number from 1.0 to 2.0 (the most primary rows a backend may have, as a multiple of its fair share)", v.brief())
		return 0
	}
	m := math.Round(f * table.BalanceScale)
	if math.Abs(m-f*table.BalanceScale) > 1e-6 {
		p.fail(path, "%s has more than three decimals", v.brief())
		return 0
	}
	return uint16(m)
}

// history reads a table's history_s and history_hops (defaults:
// table.DefaultHistory).
func (p *parser) history(path string, v *jsonValue) table.HistorySettings {
	h := table.DefaultHistory()
	if hv := v.get("history_s"); hv != nil {
		max := int64(table.MaxHistoryWindow / time.Second)
		n, err := strconv.ParseInt(hv.num.String(), 10, 64)
		if hv.kind != jsonNumber || err != nil || n < 0 || n > max {
			p.fail(path+".history_s", "%s is not a number of seconds from 0 to %d", hv.brief(), max)
		} else {
			h.Window = time.Duration(n) * time.Second
		}
	}
	if hv := v.get("history_hops"); hv != nil {
		if hv.kind != jsonBool {
			p.fail(path+".history_hops", "%s is not true or false", hv.brief())
		} else {
			h.NoHops = !hv.boolean
		}
	}
	return h
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// domainRE is a failure domain's name: a rack or a power feed as the
// operator calls it.
var domainRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func (p *parser) table(path string, v *jsonValue) table.TableConfig {
	var t table.TableConfig
	var idx []int // where each of t.Binds stood
	defer func() { p.bindIdx = append(p.bindIdx, idx) }()
	if !p.object(path, v, "name", "hash_key", "seed", "binds", "backends", "ramp_interval_s", "balance_factor", "quic", "history_s", "history_hops") {
		return t
	}
	t.History = p.history(path, v)
	if qv := v.get("quic"); qv != nil {
		t.QUIC = p.quic(path+".quic", qv)
	}
	if bv := v.get("balance_factor"); bv != nil {
		t.Balance = p.balance(path+".balance_factor", bv)
	}
	if rv := v.get("ramp_interval_s"); rv != nil {
		// Ramps took a lowered weight in steps, each safe with two hops;
		// history keeps connections through the change at once. Still
		// read, so that a config that has it stays valid.
		n, err := strconv.ParseInt(rv.num.String(), 10, 64)
		if rv.kind != jsonNumber || err != nil || n < 1 || n > 86400 {
			p.fail(path+".ramp_interval_s", "%s is not a number of seconds from 1 to 86400", rv.brief())
		} else {
			p.warns = append(p.warns, path+".ramp_interval_s: no longer used: changes are applied at once, and each row's earlier primaries keep its connections (history_s)")
		}
	}
	if n := v.get("name"); n != nil {
		if n.kind != jsonString {
			p.fail(path+".name", "%s is not a string", n.brief())
		} else if !nameRE.MatchString(n.str) {
			p.fail(path+".name", "%s is not a valid name (1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit)", n.brief())
		} else {
			t.Name = n.str
		}
	}
	t.HashKey = p.key(path, v, "hash_key")
	t.Seed = p.key(path, v, "seed")

	if bv := p.required(path, v, "binds", jsonArray); bv != nil {
		if len(bv.elems) == 0 {
			p.fail(path+".binds", "empty: a table needs at least one bind")
		}
		if len(bv.elems) > table.MaxBinds {
			p.fail(path+".binds", "%d binds, more than GLB's limit of %d", len(bv.elems), table.MaxBinds)
		}
		seen := map[table.Bind]int{}
		for i, e := range bv.elems {
			bp := fmt.Sprintf("%s.binds[%d]", path, i)
			b, ok := p.bind(bp, e)
			if !ok {
				continue
			}
			if j, dup := seen[b]; dup {
				p.fail(bp, "same bind as %s.binds[%d]", path, j)
			}
			seen[b] = i
			t.Binds = append(t.Binds, b)
			idx = append(idx, i)
		}
	}

	if bv := p.required(path, v, "backends", jsonArray); bv != nil {
		if len(bv.elems) == 0 {
			p.fail(path+".backends", "empty: a table needs at least one backend")
		}
		if len(bv.elems) > table.MaxBackends {
			p.fail(path+".backends", "%d backends, more than GLB's limit of %d", len(bv.elems), table.MaxBackends)
		}
		seen := map[netip.Addr]int{}
		allInactive := true
		for i, e := range bv.elems {
			bp := fmt.Sprintf("%s.backends[%d]", path, i)
			b, ok := p.backend(bp, e)
			if !ok {
				allInactive = false // already an error; do not pile on
				continue
			}
			if j, dup := seen[b.IP.Unmap()]; dup {
				p.fail(bp+".ip", "%q is also %s.backends[%d]", b.IP, path, j)
			}
			seen[b.IP.Unmap()] = i
			if b.State != table.StateInactive {
				allInactive = false
			}
			t.Backends = append(t.Backends, b)
		}
		if allInactive && len(bv.elems) > 0 {
			p.fail(path+".backends", "every backend is inactive: the table would have no rows to serve")
		}
		p.partialDomains(path, t.Backends)
		p.serverIDs(path, v, bv, &t)
		t.SortQUIC()
	}
	return t
}

// key parses a 32-hex-digit secret. Its value is never echoed.
func (p *parser) key(path string, v *jsonValue, name string) table.Key {
	var k table.Key
	// Not p.required: its messages quote the value, and a key given as a
	// number or a boolean is still a secret.
	f := v.get(name)
	if f == nil {
		p.fail(join(path, name), "missing")
		return k
	}
	if f.kind != jsonString {
		p.fail(join(path, name), "is %s, not a string of 32 hex digits (value not shown: it is a secret)", f.kind)
		return k
	}
	if len(f.str) != 32 {
		p.fail(join(path, name), "must be exactly 32 hex digits, got %d characters (value not shown: it is a secret)", len(f.str))
		return k
	}
	if _, err := hex.Decode(k[:], []byte(f.str)); err != nil {
		p.fail(join(path, name), "must be exactly 32 hex digits, found a non-hex character (value not shown: it is a secret)")
	}
	return k
}

func (p *parser) bind(path string, v *jsonValue) (table.Bind, bool) {
	var b table.Bind
	if !p.object(path, v, "ip", "proto", "port", "port_start", "port_end") {
		return b, false
	}
	before := len(p.errs)
	if ipv := p.required(path, v, "ip", jsonString); ipv != nil {
		pfx, err := parsePrefix(ipv.str)
		if err != nil {
			p.fail(path+".ip", "%s %v", ipv.brief(), err)
		} else {
			b.Prefix = pfx
			if pfx.Masked().Addr() != pfx.Addr() {
				p.warns = append(p.warns, fmt.Sprintf("%s.ip: %s has host bits set; it matches %s", path, ipv.brief(), pfx.Masked()))
			}
		}
	}
	if pv := p.required(path, v, "proto", jsonString); pv != nil {
		proto, err := table.ParseProto(pv.str)
		if err != nil {
			p.fail(path+".proto", "%v", err)
		}
		b.Proto = proto
	}
	port, start, end := v.get("port"), v.get("port_start"), v.get("port_end")
	switch {
	case port != nil && (start != nil || end != nil):
		p.fail(path, "has both port and port_start/port_end; use one")
	case port != nil:
		n, ok := p.port(path+".port", port)
		if ok && n == 0 {
			p.fail(path+".port", "0 is not a port a client connects to (1-65535)")
		}
		b.PortStart, b.PortEnd = n, n
	case start != nil || end != nil:
		if start == nil {
			p.fail(path+".port_start", "missing (port_end is set)")
		}
		if end == nil {
			p.fail(path+".port_end", "missing (port_start is set)")
		}
		if start == nil || end == nil {
			break
		}
		s, ok1 := p.port(path+".port_start", start)
		e, ok2 := p.port(path+".port_end", end)
		if ok1 && ok2 && s > e {
			p.fail(path, "port_start %d is greater than port_end %d", s, e)
		}
		if ok1 && s == 0 {
			p.fail(path+".port_start", "0 is not a port a client connects to (1-65535)")
		}
		b.PortStart, b.PortEnd = s, e
	default:
		p.fail(path, "needs port, or port_start and port_end")
	}
	return b, len(p.errs) == before
}

func parsePrefix(s string) (netip.Prefix, error) {
	addrPart, bitsPart, hasBits := strings.Cut(s, "/")
	addr, err := netip.ParseAddr(addrPart)
	if err != nil || addr.Zone() != "" {
		return netip.Prefix{}, errors.New("is not an IP address or CIDR prefix")
	}
	if addr.Is4In6() { // no IPv4 packet carries it: the bind would match nothing
		return netip.Prefix{}, fmt.Errorf("is an IPv4-mapped IPv6 address: write it as %s", addr.Unmap())
	}
	bits := addr.BitLen()
	if hasBits {
		n, err := strconv.Atoi(bitsPart)
		if err != nil || n < 0 || strings.HasPrefix(bitsPart, "+") {
			return netip.Prefix{}, errors.New("has a malformed prefix length")
		}
		if n > addr.BitLen() {
			return netip.Prefix{}, fmt.Errorf("has prefix length %d, longer than the %d bits of the address", n, addr.BitLen())
		}
		bits = n
	}
	return netip.PrefixFrom(addr, bits), nil
}

func (p *parser) port(path string, v *jsonValue) (uint16, bool) {
	if v.kind != jsonNumber {
		p.fail(path, "%s is not a number", v.brief())
		return 0, false
	}
	n, err := strconv.ParseInt(v.num.String(), 10, 64)
	if err != nil || n < 0 || n > 65535 {
		p.fail(path, "%s is not a port (0-65535)", v.brief())
		return 0, false
	}
	return uint16(n), true
}

func (p *parser) backend(path string, v *jsonValue) (table.Backend, bool) {
	var b table.Backend
	if !p.object(path, v, "ip", "state", "healthy", "healthchecks", "weight", "domain", "server_id") {
		return b, false
	}
	before := len(p.errs)
	if ipv := p.required(path, v, "ip", jsonString); ipv != nil {
		addr, err := netip.ParseAddr(ipv.str)
		switch {
		case err != nil || addr.Zone() != "":
			p.fail(path+".ip", "%s is not an IP address", ipv.brief())
		case addr.Is4In6():
			// The datapath would send it GUE over IPv6 to an address no
			// host answers on, while checks (made to the IPv4 address)
			// pass.
			p.fail(path+".ip", "%s is an IPv4-mapped IPv6 address: write it as %s", ipv.brief(), addr.Unmap())
		}
		b.IP = addr
	}
	if sv := p.required(path, v, "state", jsonString); sv != nil {
		s, err := table.ParseState(sv.str)
		if err != nil {
			p.fail(path+".state", "%v", err)
		}
		b.State = s
	}
	if hv := v.get("healthy"); hv == nil {
		b.Checked = true // the checks decide; until they do, down
	} else if hv.kind != jsonBool {
		p.fail(path+".healthy", "%s is not true or false", hv.brief())
	} else {
		b.Healthy = hv.boolean
	}
	if hc := v.get("healthchecks"); hc != nil {
		b.Healthchecks = p.healthchecks(path+".healthchecks", hc)
	}
	if wv := v.get("weight"); wv != nil {
		b.Weight = p.weight(path+".weight", wv)
	}
	if dv := v.get("domain"); dv != nil {
		if dv.kind != jsonString {
			p.fail(path+".domain", "%s is not a string", dv.brief())
		} else if !domainRE.MatchString(dv.str) {
			p.fail(path+".domain", "%s is not a failure domain (1-64 of A-Z a-z 0-9 . _ -)", dv.brief())
		} else {
			b.Domain = dv.str
		}
	}
	return b, len(p.errs) == before
}

// weight reads a backend's "weight": an integer from 1 to 65535. Zero is
// refused rather than taken as "no rows": taking a backend out of the
// rows is what "draining" (keeping its connections) and "inactive" are
// for.
func (p *parser) weight(path string, v *jsonValue) uint16 {
	if v.kind != jsonNumber {
		p.fail(path, "%s is not a number", v.brief())
		return 0
	}
	n, err := strconv.ParseInt(v.num.String(), 10, 64)
	switch {
	case err != nil:
		p.fail(path, "%s is not a whole number from 1 to %d", v.brief(), table.MaxWeight)
	case n == 0:
		p.fail(path, "0 is not a weight: to take a backend's rows away, set its state to \"draining\" (it keeps its connections) or \"inactive\"")
	case n < 0 || n > table.MaxWeight:
		p.fail(path, "%s is not a weight (1-%d)", v.brief(), table.MaxWeight)
	default:
		return uint16(n)
	}
	return 0
}

// partialDomains warns of a table where some backends have a failure
// domain and others none: those count as one more domain, "", which is
// seldom what was meant.
func (p *parser) partialDomains(path string, bs []table.Backend) {
	var without []string
	for _, b := range bs {
		if b.Domain == "" {
			without = append(without, b.IP.String())
		}
	}
	if len(without) == 0 || len(without) == len(bs) {
		return
	}
	if len(without) > 3 {
		without = append(without[:3], fmt.Sprintf("and %d more", len(without)-3))
	}
	p.warns = append(p.warns, fmt.Sprintf("%s.backends: %d of %d have a domain and %s none: those count as a domain of their own (\"\"), "+
		"so their rows' two hops may share a rack with no name; give every backend of the table a domain, or none",
		path, len(bs)-len(without), len(bs), strings.Join(without, ", ")))
}
