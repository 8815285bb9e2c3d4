package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/director/director/internal/change"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

var diffCmd = &command{
	name: "diff", args: "OLD NEW [--json] [--all] [--picture F.png|F.svg [--table NAME]]",
	summary: "Compare two configs or GLB binaries for review.",
	help: "Compare two configs or GLB binaries: backend changes, rows moved, connections at risk,\n" +
		"shares before and after. --picture draws what the change moves (rows that stay dimmed, moved rows\n" +
		"in their new primary's colour, rows at risk in red). A table whose inputs are the same on both sides\n" +
		"is shown in one line, unbuilt; --all builds and shows it whole (--picture builds every table).\n" +
		"Exit status 0: no change, 2: changes, 1: error.",
	run: runDiff,
}

func runDiff(e *env, c *command, args []string) error {
	fs := e.flags(c)
	asJSON := fs.Bool("json", false, "print the diff as a JSON document")
	all := fs.Bool("all", false, "build and show every table whole, also those whose inputs are the same on both sides")
	pic := pictureFlags(fs, "draw what the change moves into `FILE` (.png or .svg)")
	pos, err := e.parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	if err := pic.check(); err != nil {
		return fmt.Errorf("diff: %w", err)
	}
	old, new, st, err := change.Diff(pos[0], pos[1], !*all && *pic.path == "")
	e.built = st
	if err != nil {
		return err
	}
	// Table warnings are in the diff; the rest are the files' own.
	for _, src := range []*config.Source{old, new} {
		if src.Config != nil {
			for _, w := range src.Config.Warnings {
				fmt.Fprintf(e.stderr, "director: warning: %s: %s\n", src.Path, w)
			}
		}
		for _, w := range table.UnservableWarnings(src.Tables) {
			fmt.Fprintf(e.stderr, "director: warning: %s: %s\n", src.Path, w)
		}
	}
	d := table.Compare(old.Tables, new.Tables)
	if *pic.path != "" {
		verdict := "no change"
		if d.Changed {
			verdict = "changed ('director plan' judges it against what is live)"
		}
		panels, err := changePanels(pic, old.Tables, new.Tables, d, verdict)
		if err != nil {
			return fmt.Errorf("diff: %w", err)
		}
		if err := writePicture(e, *pic.path, panels); err != nil {
			return err
		}
	}
	if *asJSON {
		if err := writeJSON(e.stdout, d); err != nil {
			return err
		}
	} else {
		printDiff(e.stdout, d, "no changes")
	}
	if d.Changed {
		return exitCode(exitChanges)
	}
	return nil
}

// sideString is a backend's state and health, and its weight when it has
// one other than 1.
func sideString(s *table.BackendSide) string {
	out := s.State + "/" + healthWord(s.Healthy)
	if s.Weight > 1 {
		out += fmt.Sprintf(" weight %d", s.Weight)
	}
	if s.Domain != "" {
		out += " in " + s.Domain
	}
	if s.ServerID != "" {
		out += " server ID " + s.ServerID
	}
	if s.Cap > 0 {
		out += fmt.Sprintf(" cap %d", s.Cap)
		if s.AtCap {
			out += " (at cap)"
		}
	}
	return out
}

// quicString is a table's QUIC-LB routing, "off" for none.
func quicString(q *table.QUIC) string {
	if q == nil {
		return "off"
	}
	return q.String()
}

// printQUICConfigs prints the QUIC-LB configs td adds (+), removes (-),
// with what they carried lately where that was measured, and alters (~).
func printQUICConfigs(w io.Writer, td table.TableDiff) {
	for _, c := range td.QUICConfigs {
		var o, n table.QUICConfig
		if td.OldQUIC != nil {
			o, _, _ = td.OldQUIC.Config(c.ConfigID)
		}
		if td.NewQUIC != nil {
			n, _, _ = td.NewQUIC.Config(c.ConfigID)
		}
		switch c.Change {
		case "added":
			fmt.Fprintf(w, "  + quic %s\n", n)
		case "removed":
			use := ""
			if c.Recent != nil {
				use = fmt.Sprintf(" (%d packets in the last %s)", *c.Recent, time.Duration(c.WindowS*float64(time.Second)))
			}
			fmt.Fprintf(w, "  - quic %s%s\n", o, use)
		default:
			if o.String() == n.String() {
				fmt.Fprintf(w, "  ~ quic %s: key changed (values not shown)\n", o)
			} else {
				fmt.Fprintf(w, "  ~ quic %s -> %s\n", o, n)
			}
		}
	}
}

// factorString is a balance factor as the config gives it, or "none".
func factorString(f float64) string {
	if f == 0 {
		return "none"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// listQuiet is how many unchanged tables without warnings a diff names,
// a line each; more are counted in one line, so that a change to one of
// 1,024 tables reads as that change. An unchanged table with a warning is
// always named, with it.
const listQuiet = 8

// quiet is a table a diff may count rather than name: unchanged, and
// nothing to warn of.
func quiet(td *table.TableDiff) bool {
	return td.SameInputs || (td.Brief && len(td.Warnings) == 0)
}

// printDiff prints d for a person; none is its last line when no table
// changes.
func printDiff(w io.Writer, d *table.Diff, none string) {
	nquiet := 0
	for i := range d.Tables {
		if quiet(&d.Tables[i]) {
			nquiet++
		}
	}
	counted := nquiet > listQuiet
	printed := 0
	prevShort := false
	for _, td := range d.Tables {
		if counted && quiet(&td) {
			continue
		}
		short := td.SameInputs || td.Brief
		if printed > 0 && !(short && prevShort) {
			fmt.Fprintln(w)
		}
		printed++
		prevShort = short
		if td.SameInputs {
			fmt.Fprintf(w, "table %s: unchanged (the same inputs on both sides: not built; --all shows it whole)\n", td.Name)
			continue
		}
		if td.Brief {
			fmt.Fprintf(w, "table %s: unchanged (fingerprint %s; --all shows it whole)\n", td.Name, table.ShortFingerprint(td.NewFingerprint))
			for _, warn := range td.Warnings {
				fmt.Fprintf(w, "  ! %s\n", warn)
			}
			continue
		}
		printTableDiff(w, td)
	}
	if counted {
		if printed > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%d tables unchanged (--all shows them whole)\n", nquiet)
	}
	if !d.Changed {
		fmt.Fprintln(w, "\n"+none)
	}
}

// printTableDiff prints a table's change whole.
func printTableDiff(w io.Writer, td table.TableDiff) {
	fmt.Fprintf(w, "table %s: %s\n", td.Name, td.Status)
	switch td.Status {
	case table.StatusAdded:
		fmt.Fprintf(w, "  fingerprint  (none) -> %s\n", table.ShortFingerprint(td.NewFingerprint))
	case table.StatusRemoved:
		fmt.Fprintf(w, "  fingerprint  %s -> (none)\n", table.ShortFingerprint(td.OldFingerprint))
	default:
		arrow := table.ShortFingerprint(td.OldFingerprint)
		if td.NewFingerprint != td.OldFingerprint {
			arrow += " -> " + table.ShortFingerprint(td.NewFingerprint)
		} else {
			arrow += " (same)"
		}
		fmt.Fprintf(w, "  fingerprint  %s\n", arrow)
	}
	if td.HashKeyChanged {
		fmt.Fprintf(w, "  hash_key     changed (values not shown)\n")
	}
	if len(td.QUICConfigs) > 0 {
		printQUICConfigs(w, td)
	} else if o, n := quicString(td.OldQUIC), quicString(td.NewQUIC); o != n && td.Status == table.StatusChanged {
		fmt.Fprintf(w, "  quic         %s -> %s\n", o, n)
	}
	for _, b := range td.BindsAdded {
		fmt.Fprintf(w, "  + bind %s\n", b)
	}
	for _, b := range td.BindsRemoved {
		fmt.Fprintf(w, "  - bind %s\n", b)
	}
	iw := 0
	for _, bc := range td.Backends {
		iw = max(iw, len(bc.IP))
	}
	var changes []string
	for _, bc := range td.Backends {
		switch bc.Change {
		case table.ChangeAdded:
			changes = append(changes, fmt.Sprintf("  + %-*s %s", iw, bc.IP, sideString(bc.New)))
		case table.ChangeRemoved:
			changes = append(changes, fmt.Sprintf("  - %-*s %s", iw, bc.IP, sideString(bc.Old)))
		case table.ChangeChanged:
			changes = append(changes, fmt.Sprintf("  ~ %-*s %s -> %s", iw, bc.IP, sideString(bc.Old), sideString(bc.New)))
		}
	}
	if len(changes) > 0 {
		fmt.Fprintln(w, "  backends:")
		fmt.Fprintln(w, "  "+strings.Join(changes, "\n  "))
	}
	if td.Status == table.StatusChanged || td.Status == table.StatusUnchanged {
		r := td.Rows
		minimal := "yes"
		if !r.Minimal {
			minimal = "no"
		}
		fmt.Fprintf(w, "  rows (of %d):\n", r.Total)
		fmt.Fprintf(w, "    primary changed    %6d %s   minimal possible %d (minimal: %s)\n", r.PrimaryChanged, pct(r.PrimaryChanged), r.MinimalPrimaryMoves, minimal)
		fmt.Fprintf(w, "    secondary changed  %6d %s\n", r.SecondaryChanged, pct(r.SecondaryChanged))
		fmt.Fprintf(w, "    swapped            %6d %s\n", r.Swapped, pct(r.Swapped))
		fmt.Fprintf(w, "    at risk            %6d %s   (a primary of the last %s, up, in no hop of the new chain)\n", r.AtRisk, pct(r.AtRisk), windowString(td.History))
		if r.AtRiskDown > 0 {
			fmt.Fprintf(w, "    earlier primary down %4d %s   (lost with it; not counted by the verdict)\n", r.AtRiskDown, pct(r.AtRiskDown))
		}
	}
	printHistory(w, td.History)
	printShares(w, td)
	for _, warn := range td.Warnings {
		fmt.Fprintf(w, "  ! %s\n", warn)
	}
}

func printShares(w io.Writer, td table.TableDiff) {
	top := 1
	for _, bc := range td.Backends {
		if bc.Old != nil {
			top = max(top, bc.Old.PrimaryRows)
		}
		if bc.New != nil {
			top = max(top, bc.New.PrimaryRows)
		}
	}
	iw := 0
	for _, bc := range td.Backends {
		iw = max(iw, len(bc.IP))
	}
	fmt.Fprintln(w, "  primary share, before -> after:")
	for _, bc := range td.Backends {
		var o, n int
		if bc.Old != nil {
			o = bc.Old.PrimaryRows
		}
		if bc.New != nil {
			n = bc.New.PrimaryRows
		}
		line := fmt.Sprintf("    %-*s %s %s -> %s %s", iw, bc.IP, pct(o), bar(float64(o)/float64(top)), pct(n), bar(float64(n)/float64(top)))
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	printDomainChange(w, td.OldDomains, td.NewDomains)
	if td.OldBalance != td.NewBalance {
		fmt.Fprintf(w, "  balance factor  %s -> %s\n", factorString(td.OldBalance), factorString(td.NewBalance))
	} else if td.NewBalance != 0 {
		fmt.Fprintf(w, "  balance factor  %s\n", factorString(td.NewBalance))
	}
}

// printDomainChange shows each domain's share and what its failure would
// orphan, before and after, where either side has domains.
func printDomainChange(w io.Writer, o, n *table.DomainStats) {
	if o == nil && n == nil {
		return
	}
	type pair struct{ o, n *table.DomainShare }
	var names []string
	by := map[string]*pair{}
	add := func(st *table.DomainStats, old bool) {
		if st == nil {
			return
		}
		for i := range st.Domains {
			d := &st.Domains[i]
			if by[d.Name] == nil {
				by[d.Name] = &pair{}
				names = append(names, d.Name)
			}
			if old {
				by[d.Name].o = d
			} else {
				by[d.Name].n = d
			}
		}
	}
	add(n, false)
	add(o, true)
	side := func(d *table.DomainShare) string {
		if d == nil {
			return "-"
		}
		return fmt.Sprintf("%s, %d orphaned", pct(d.PrimaryRows), d.Orphaned)
	}
	same := func(st *table.DomainStats) string {
		if st == nil {
			return "-"
		}
		return fmt.Sprintf("%d (%d conflicts)", st.SameDomain, st.Conflicts)
	}
	fmt.Fprintln(w, "  failure domains, before -> after (primary share, rows with no hop if it failed):")
	for _, name := range names {
		fmt.Fprintf(w, "    %-12s %s -> %s\n", domainName(name), side(by[name].o), side(by[name].n))
	}
	fmt.Fprintf(w, "    rows with both hops in one domain: %s -> %s\n", same(o), same(n))
}

// domainName shows the domain of backends given none.
func domainName(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// windowString is the span a table remembers its rows' primaries for.
func windowString(h *table.HistoryDiff) string {
	if h == nil || h.WindowS == 0 {
		return "change"
	}
	return (time.Duration(h.WindowS) * time.Second).String()
}

// printHistory says what a table remembers of its rows' earlier primaries
// after the change, and whether its packets list them.
func printHistory(w io.Writer, h *table.HistoryDiff) {
	if h == nil || h.Rows == 0 {
		return
	}
	listed := "no packet lists them (history_hops off: GLB's two hops)"
	switch {
	case h.Hops && h.HopRows == 0:
		listed = "each is its row's secondary"
	case h.Hops:
		listed = fmt.Sprintf("%d list them in hops after the secondary, up to %d a row", h.HopRows, h.MaxHops)
	}
	until := ""
	if h.Until != nil {
		until = ", until " + h.Until.Format(time.RFC3339)
	}
	fmt.Fprintf(w, "  history: %d rows remember an earlier primary%s; %s\n", h.Rows, until, listed)
	if h.Overflow > 0 {
		fmt.Fprintf(w, "    %d rows had more earlier primaries than their hops hold (%d)\n", h.Overflow, table.HistoryHops)
	}
}
