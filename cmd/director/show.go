package main

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// showDoc is show's JSON document (docs/formats.md, "show --json").
type showDoc struct {
	Version int           `json:"version"`
	Source  string        `json:"source"` // "config" or "glb-binary"
	Tables  []showTable   `json:"tables"`
	Lookups []lookupEntry `json:"lookups,omitempty"`
	// CIDLookups are --lookup's of a QUIC connection ID.
	CIDLookups []cidLookup `json:"cid_lookups,omitempty"`
	Warnings   []string    `json:"warnings"`
}

type showTable struct {
	Index       int           `json:"index"`
	Name        string        `json:"name"`
	Fingerprint string        `json:"fingerprint"`
	Binds       []showBind    `json:"binds"`
	Backends    []showBackend `json:"backends"`
	NoGoodRows  int           `json:"no_good_rows"`
	// Domains is absent where the backends are in one domain or none.
	Domains *table.DomainStats `json:"domains,omitempty"`
	// Balance is absent where the table has no balance factor.
	Balance *table.BalanceStats `json:"balance,omitempty"`
	// QUIC is absent where the table has no QUIC-LB routing.
	QUIC *table.QUIC `json:"quic,omitempty"`
}

type showBind struct {
	IP         string `json:"ip"`
	PrefixBits int    `json:"prefix_bits"`
	Proto      string `json:"proto"`
	PortStart  uint16 `json:"port_start"`
	PortEnd    uint16 `json:"port_end"`
}

type showBackend struct {
	IP            string `json:"ip"`
	State         string `json:"state"`
	Healthy       bool   `json:"healthy"`
	Weight        int    `json:"weight"`
	Domain        string `json:"domain,omitempty"`
	ServerID      string `json:"server_id,omitempty"` // QUIC-LB, hex
	PrimaryRows   int    `json:"primary_rows"`
	SecondaryRows int    `json:"secondary_rows"`
	// Cap and AtCap: with a balance factor, its cap on primary rows and
	// whether it is primary for that many.
	Cap   int  `json:"cap,omitempty"`
	AtCap bool `json:"at_cap,omitempty"`
}

type lookupEntry struct {
	Table     string `json:"table"`
	Index     int    `json:"index"`
	Client    string `json:"client"`
	Row       int    `json:"row"`
	Primary   string `json:"primary"`
	Secondary string `json:"secondary"`
	// With alt_hash_fields: the alternate hash's row and hops, listed
	// after the first two in the GUE hop list.
	AltRow       *int   `json:"alt_row,omitempty"`
	AltPrimary   string `json:"alt_primary,omitempty"`
	AltSecondary string `json:"alt_secondary,omitempty"`
	// The hash fields the row was found with.
	HashFields string `json:"hash_fields"`
}

var showCmd = &command{
	uses: usesDirectorConfig,
	name: "show", args: "CONFIG|FILE [--json] [--picture F.png|F.svg [--table NAME]] [--lookup CLIENT[:PORT]|CONNECTION-ID [--to VIP[:PORT]] [--proto tcp|udp]]",
	summary: "Summarise the tables of a config or GLB binary.",
	help: "Summarise tables from a config or GLB binary: backends, states, shares, fingerprints.\n" +
		"--lookup prints the row and hops a client's flow maps to, hashed as the datapath hashes it: the\n" +
		"fields of --director-config's hash_fields (the source address by default) and alt_hash_fields,\n" +
		"with the client's port from CLIENT:PORT and the VIP and its port from --to. Given a QUIC\n" +
		"connection ID in hex instead (a table with a quic block), it prints the backend the ID names in\n" +
		"each such table, as the datapath reads a long header carrying it, or why its packets follow the row.\n" +
		"--picture draws each table's 65,536 rows as a 256x256 grid (row r at column r%256, line r/256),\n" +
		"coloured by primary backend, tables side by side, with a legend of each backend's share, state,\n" +
		"health, weight and domain: PNG or SVG by the file's extension.",
	run: runShow,
}

func runShow(e *env, c *command, args []string) error {
	fs := e.flags(c)
	asJSON := fs.Bool("json", false, "print a JSON document instead of text")
	lookup := fs.String("lookup", "", "client `ADDR[:PORT]`, or a QUIC connection ID in hex, to look up in every table (or those --to selects)")
	to := fs.String("to", "", "only tables with a bind matching `VIP[:PORT]` (with --lookup)")
	protoName := fs.String("proto", "tcp", "`PROTO` for --to: tcp or udp")
	pic := pictureFlags(fs, "draw the tables into `FILE` (.png or .svg)")
	pos, err := e.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if err := pic.check(); err != nil {
		return fmt.Errorf("show: %w", err)
	}
	proto, err := table.ParseProto(*protoName)
	if err != nil {
		return fmt.Errorf("show: --proto: %w", err)
	}
	src, err := config.Load(pos[0])
	if err != nil {
		return err
	}
	doc := showDoc{Version: 1, Source: "config", Warnings: append([]string{}, src.Warnings...)}
	if src.Binary {
		doc.Source = "glb-binary"
	}
	for i, t := range src.Tables {
		doc.Tables = append(doc.Tables, describe(i, t))
	}
	if *lookup != "" {
		if err := showLookups(e, &doc, src.Tables, *lookup, *to, proto); err != nil {
			return err
		}
	} else if *to != "" {
		return fmt.Errorf("show: --to needs --lookup")
	}
	if *pic.path != "" {
		panels, err := tablePanels(pic, src.Tables)
		if err != nil {
			return fmt.Errorf("show: %w", err)
		}
		if err := writePicture(e, *pic.path, panels); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSON(e.stdout, doc)
	}
	if src.Config != nil {
		warnAll(e, pos[0], src.Config.Warnings) // table warnings are printed inline
	}
	warnAll(e, pos[0], table.UnservableWarnings(src.Tables))
	printShow(e, src.Tables, &doc, *lookup != "")
	return nil
}

// showLookups fills doc's lookups of what --lookup names: a client's flow
// (hashed with --director-config's fields, the defaults without one) or,
// given hex that is no address, a QUIC connection ID.
func showLookups(e *env, doc *showDoc, tables []*table.Table, lookup, to string, proto table.Proto) error {
	dc, err := e.directorConfig()
	if err != nil {
		return err
	}
	if dc == nil {
		d := table.DefaultDirectorConfig()
		dc = &d
	}
	if _, _, _, aerr := parseHostPort(lookup); aerr != nil {
		if cid, ok := connectionID(lookup); ok {
			doc.CIDLookups, err = lookupCID(tables, cid, to)
		}
	}
	if doc.CIDLookups == nil && err == nil {
		doc.Lookups, err = lookupAll(tables, dc, lookup, to, proto)
	}
	if err != nil {
		return fmt.Errorf("show: %w", err)
	}
	return nil
}

func describe(i int, t *table.Table) showTable {
	st := showTable{Index: i, Name: t.Name, Fingerprint: table.Fingerprint(t), NoGoodRows: t.NoGoodRows, Domains: table.Domains(t), Balance: table.BalanceOf(t)}
	if t.QUIC.On() {
		q := t.QUIC
		st.QUIC = &q
	}
	prim, sec := make([]int, len(t.Backends)), make([]int, len(t.Backends))
	for _, r := range t.Rows {
		prim[r.Primary]++
		sec[r.Secondary]++
	}
	for _, b := range t.Binds {
		st.Binds = append(st.Binds, showBind{IP: b.Prefix.Addr().String(), PrefixBits: b.Prefix.Bits(),
			Proto: b.Proto.String(), PortStart: b.PortStart, PortEnd: b.PortEnd})
	}
	for j, b := range t.Backends {
		sb := showBackend{IP: b.IP.String(), State: b.State.String(),
			Healthy: b.Healthy, Weight: int(b.W()), Domain: b.Domain, ServerID: t.QUIC.ServerIDsOf(b), PrimaryRows: prim[j], SecondaryRows: sec[j]}
		if st.Balance != nil && b.Good() {
			sb.Cap, sb.AtCap = st.Balance.Caps[j], prim[j] >= st.Balance.Caps[j]
		}
		st.Backends = append(st.Backends, sb)
	}
	return st
}

// parseHostPort accepts ADDR, ADDR:PORT and [V6]:PORT.
func parseHostPort(s string) (netip.Addr, uint16, bool, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), ap.Port(), true, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, 0, false, fmt.Errorf("%q is not an address or address:port", s)
	}
	return a, 0, false, nil
}

// lookupAll finds a client's row and hops in each table (those with a bind
// --to matches, if given), hashed as the program hashes: dc's hash fields
// and alternate ones, over the client, its port, the VIP and its port.
func lookupAll(tables []*table.Table, dc *table.DirectorConfig, client, to string, proto table.Proto) ([]lookupEntry, error) {
	addr, cport, hasCPort, err := parseHostPort(client)
	if err != nil {
		return nil, fmt.Errorf("--lookup: %w (nor a QUIC connection ID: hex, 1 to %d bytes)", err, table.MaxCIDLen)
	}
	var vip netip.Addr
	var vport uint16
	var hasPort bool
	if to != "" {
		if vip, vport, hasPort, err = parseHostPort(to); err != nil {
			return nil, fmt.Errorf("--to: %w", err)
		}
	}
	fields := dc.HashFields | dc.AltHashFields
	switch {
	case fields&table.HashSrcPort != 0 && !hasCPort:
		return nil, fmt.Errorf("--lookup: the hash fields (%s) include src_port: give CLIENT:PORT", fieldsOf(dc))
	case fields&table.HashDstAddr != 0 && to == "":
		return nil, fmt.Errorf("--lookup: the hash fields (%s) include dst_addr: give --to VIP[:PORT]", fieldsOf(dc))
	case fields&table.HashDstPort != 0 && !hasPort:
		return nil, fmt.Errorf("--lookup: the hash fields (%s) include dst_port: give --to VIP:PORT", fieldsOf(dc))
	}
	f := model.Flow{Client: addr, ClientPort: cport, VIP: vip, VIPPort: vport, Proto: uint8(proto)}
	var out []lookupEntry
	for i, t := range tables {
		if to != "" && !bindsMatch(t, vip, vport, hasPort, proto) {
			continue
		}
		row, p, s := t.Lookup(model.FlowHash(t.HashKey, f, dc.HashFields))
		name := table.DisplayName(t.Name, i)
		l := lookupEntry{Table: name, Index: i, Client: addr.String(), Row: row,
			Primary: p.IP.String(), Secondary: s.IP.String(), HashFields: fieldsOf(dc)}
		if dc.AltHashFields != 0 {
			ar, ap, as := t.Lookup(model.FlowHash(t.HashKey, f, dc.AltHashFields))
			l.AltRow, l.AltPrimary, l.AltSecondary = &ar, ap.IP.String(), as.IP.String()
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no table has a %s bind matching %s", proto, to)
	}
	return out, nil
}

// fieldsOf names the hash fields a lookup uses.
func fieldsOf(dc *table.DirectorConfig) string {
	if dc.AltHashFields == 0 {
		return dc.HashFields.String()
	}
	return dc.HashFields.String() + "; alt " + dc.AltHashFields.String()
}

func bindsMatch(t *table.Table, vip netip.Addr, port uint16, hasPort bool, proto table.Proto) bool {
	for _, b := range t.Binds {
		if hasPort && b.Matches(vip, proto, port) {
			return true
		}
		if !hasPort && b.Matches(vip, proto, b.PortStart) {
			return true
		}
	}
	return false
}

func printShow(e *env, tables []*table.Table, doc *showDoc, lookups bool) {
	w := e.stdout
	for i, st := range doc.Tables {
		t := tables[i]
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s\n", tableLabel(t, i))
		fmt.Fprintf(w, "  fingerprint  %s\n", table.ShortFingerprint(st.Fingerprint))
		binds := make([]string, len(t.Binds))
		for j, b := range t.Binds {
			binds[j] = b.String()
		}
		fmt.Fprintf(w, "  binds        %s\n", strings.Join(binds, ", "))
		if st.QUIC != nil {
			fmt.Fprintf(w, "  quic         %s: UDP packets go to the backend their connection ID names\n", st.QUIC)
		}
		fmt.Fprintf(w, "  backends     %s\n", backendSummary(t.Backends))
		printBackends(w, t, &st)
		if bs := st.Balance; bs != nil {
			fmt.Fprintf(w, "  balance factor %s: %d backends at their cap, %d over\n", factorString(bs.Factor), bs.AtCap, bs.OverCap)
		}
		if d := st.Domains; d != nil {
			fmt.Fprintln(w, "  failure domains (primary share, rows with no hop if it failed):")
			for _, dom := range d.Domains {
				fmt.Fprintf(w, "    %-12s %3d backends  %s  %d orphaned\n", domainName(dom.Name), dom.Backends, pct(dom.PrimaryRows), dom.Orphaned)
			}
			fmt.Fprintf(w, "    rows with both hops in one domain: %d (%d conflicts: a filling primary keeps its old secondary)\n", d.SameDomain, d.Conflicts)
		}
		for _, warn := range table.TableWarnings(t) {
			fmt.Fprintf(w, "  ! %s\n", warn)
		}
	}
	if lookups {
		fmt.Fprintln(w)
		for _, l := range doc.Lookups {
			fmt.Fprintf(w, "lookup %s in %s: row %#04x, primary %s, secondary %s (hash %s)\n", l.Client, l.Table, l.Row, l.Primary, l.Secondary, l.HashFields)
			if l.AltRow != nil {
				fmt.Fprintf(w, "  alternate hash: row %#04x, primary %s, secondary %s\n", *l.AltRow, l.AltPrimary, l.AltSecondary)
			}
		}
		for _, l := range doc.CIDLookups {
			printCIDLookup(w, l)
		}
	}
}

// printBackends is show's table of a table's backends: state, health,
// the optional columns (weight, domain, server ID, cap) where the table has
// them, and shares of primary and secondary rows.
func printBackends(w io.Writer, t *table.Table, st *showTable) {
	top := 1
	for _, b := range st.Backends {
		top = max(top, b.PrimaryRows)
	}
	iw := ipWidth(t.Backends)
	// The weight column only where a weight was given: a GLB table
	// reads as it always has.
	weights := slices.ContainsFunc(t.Backends, func(b table.Backend) bool { return b.W() != 1 })
	weightHead := ""
	if weights {
		weightHead = fmt.Sprintf("%6s ", "WEIGHT")
	}
	dw := 0 // the domain column's width, where there are domains
	for _, b := range t.Backends {
		if b.Domain != "" {
			dw = max(dw, len("DOMAIN"), len(b.Domain))
		}
	}
	if dw > 0 {
		weightHead += fmt.Sprintf("%-*s ", dw, "DOMAIN")
	}
	sw := 0 // the server ID column's width, in a table with QUIC-LB routing
	if st.QUIC != nil {
		sw = len("SERVER ID")
		for _, b := range st.Backends {
			sw = max(sw, len(b.ServerID))
		}
		weightHead += fmt.Sprintf("%-*s ", sw, "SERVER ID")
	}
	if st.Balance != nil {
		weightHead += fmt.Sprintf("%-12s ", "CAP")
	}
	fmt.Fprintf(w, "  %-*s %-8s %-9s %s%-*s %s\n", iw, "BACKEND", "STATE", "HEALTH", weightHead, barWidth+14, "PRIMARY ROWS", "SECONDARY")
	for _, b := range st.Backends {
		weight := ""
		if weights {
			weight = fmt.Sprintf("%6d ", b.Weight)
		}
		if dw > 0 {
			weight += fmt.Sprintf("%-*s ", dw, b.Domain)
		}
		if sw > 0 {
			weight += fmt.Sprintf("%-*s ", sw, b.ServerID)
		}
		if st.Balance != nil {
			c := ""
			if b.Cap > 0 {
				c = strconv.Itoa(b.Cap)
				if b.AtCap {
					c += " at cap"
				}
			}
			weight += fmt.Sprintf("%-12s ", c)
		}
		fmt.Fprintf(w, "  %-*s %-8s %-9s %s%s %s %6d %s\n", iw, b.IP, b.State, healthWord(b.Healthy), weight,
			bar(float64(b.PrimaryRows)/float64(top)), pct(b.PrimaryRows), b.PrimaryRows, pct(b.SecondaryRows))
	}
}

func backendSummary(bs []table.Backend) string {
	counts := map[string]int{}
	var order []string
	unhealthy := 0
	for _, b := range bs {
		s := b.State.String()
		if counts[s] == 0 {
			order = append(order, s)
		}
		counts[s]++
		if !b.Healthy {
			unhealthy++
		}
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[s], s)
	}
	h := "all healthy"
	if unhealthy > 0 {
		h = fmt.Sprintf("%d unhealthy", unhealthy)
	}
	return fmt.Sprintf("%d (%s), %s", len(bs), strings.Join(parts, ", "), h)
}

// ipWidth is the width of the widest backend address, for aligned columns.
func ipWidth(bs []table.Backend) int {
	w := len("BACKEND")
	for _, b := range bs {
		w = max(w, len(b.IP.String()))
	}
	return w
}
