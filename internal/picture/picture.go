// Package picture draws forwarding tables for the people who review them:
// a table's 65,536 rows as a 256×256 grid coloured by primary backend,
// what a change moves (unchanged rows dimmed, rows at risk in red), and
// where traffic lands (packets per row as a heat map). A picture is one
// or more panels side by side, each with its legend, written as PNG or
// SVG. Pure Go: image/png, x/image's fixed font, and SVG written here.
package picture

import (
	"fmt"
	"image/color"
	"net/netip"
	"slices"
	"strings"

	"github.com/director/director/table"
)

// Side is the grid's side: row r is at column r%Side, line r/Side.
const Side = 256

// A Panel is one table's picture: a colour per row, a title, a legend.
type Panel struct {
	Title string
	// Cells are the rows' colours (table.Rows of them, row order), as
	// indices into Colors: a picture of many tables is drawn a slice
	// index a row, not a colour lookup.
	Cells  []uint16
	Colors []color.RGBA
	// Legend lines, each with its swatch (none where Swatch.A is 0).
	Legend []Line
	// Alarm frames the grid in red: rows at risk.
	Alarm bool
	// Rings are rows ringed (Ring inside ink), so that a single row is
	// seen with its colour.
	Rings []int
}

// A Line is a legend entry.
type Line struct {
	Swatch color.RGBA
	Text   string
}

// Color is row r's colour.
func (p *Panel) Color(r int) color.RGBA { return p.Colors[p.Cells[r]] }

// colorIndex is c's index in p.Colors, added if new.
func (p *Panel) colorIndex(c color.RGBA) uint16 {
	for i, o := range p.Colors {
		if o == c {
			return uint16(i)
		}
	}
	p.Colors = append(p.Colors, c)
	return uint16(len(p.Colors) - 1)
}

// TablePanel draws t's rows coloured by primary, its legend each
// backend's share, state, health, weight and domain (the last two where
// set), in config order.
func TablePanel(name string, t *table.Table, pal *Palette) Panel {
	p := Panel{Title: fmt.Sprintf("%s  %s", name, table.ShortFingerprint(table.Fingerprint(t))), Cells: make([]uint16, len(t.Rows))}
	colors := make([]color.RGBA, len(t.Backends))
	for i, b := range t.Backends {
		colors[i] = pal.Color(b.IP)
	}
	p.Colors = colors
	prim := make([]int, len(t.Backends))
	for r, row := range t.Rows {
		p.Cells[r] = uint16(row.Primary)
		prim[row.Primary]++
	}
	weighted := false
	for _, b := range t.Backends {
		weighted = weighted || b.W() != t.Backends[0].W() // equal weights are no weights
	}
	p.Legend = append(p.Legend, Line{Text: "primary rows; active and healthy unless said"})
	caps := table.Caps(t.Backends, t.Balance)
	if caps != nil {
		p.Legend = append(p.Legend, Line{Text: fmt.Sprintf("balance factor %g: \"at cap\" is primary for its most", float64(t.Balance)/table.BalanceScale)})
	}
	for i, b := range t.Backends {
		text := backendText(b, prim[i], len(t.Rows), weighted)
		if caps != nil && b.Good() && prim[i] >= caps[i] {
			text += " at cap"
		}
		p.Legend = append(p.Legend, Line{colors[i], text})
	}
	if t.NoGoodRows > 0 {
		p.Legend = append(p.Legend, Line{Text: fmt.Sprintf("%d rows with no good backend", t.NoGoodRows)})
	}
	return p
}

// backendText is a backend's legend line: address and share, then its
// state where not active, health where not healthy, weight where the
// table's differ, and domain: short, since a table may have 256.
func backendText(b table.Backend, rows, of int, weighted bool) string {
	s := fmt.Sprintf("%s %.1f%%", b.IP, 100*float64(rows)/float64(max(of, 1)))
	if b.State != table.StateActive {
		s += " " + b.State.String()
	}
	if !b.Healthy {
		s += " UNHEALTHY"
	}
	if weighted {
		s += fmt.Sprintf(" w%d", b.W())
	}
	if b.Domain != "" {
		s += " " + b.Domain
	}
	return s
}

// ChangePanel draws what going from o to n does to each row: rows whose
// primary stays dimmed, rows that move in their new primary's colour,
// rows at risk (atRisk, the diff's: a backend that was their primary
// within the window is up and in no hop of their new chain, so its
// connections break even with second chance) in red. verdict is the
// plan's word on the change ("safe", "UNSAFE: ..."), for the legend.
func ChangePanel(name string, o, n *table.Table, atRisk []bool, pal *Palette, verdict string) Panel {
	p := Panel{Title: fmt.Sprintf("%s  %s -> %s", name, table.ShortFingerprint(table.Fingerprint(o)), table.ShortFingerprint(table.Fingerprint(n))),
		Cells: make([]uint16, len(n.Rows))}
	// Each new backend's colour, its dimmed one, and red.
	for _, b := range n.Backends {
		p.Colors = append(p.Colors, pal.Color(b.IP))
	}
	for _, b := range n.Backends {
		p.Colors = append(p.Colors, Dim(pal.Color(b.IP)))
	}
	red := p.colorIndex(AtRisk)
	moved, risk := 0, 0
	gained := make([]int, len(n.Backends))
	for r, row := range n.Rows {
		np := n.Backends[row.Primary].IP
		op := o.Backends[o.Rows[r].Primary].IP
		c := uint16(row.Primary)
		switch {
		case atRisk != nil && atRisk[r]:
			c = red
			risk++
			if op != np {
				moved++
				gained[row.Primary]++
			}
		case op == np:
			c += uint16(len(n.Backends))
		default:
			moved++
			gained[row.Primary]++
		}
		p.Cells[r] = c
	}
	p.Alarm = risk > 0
	for _, l := range wrap("verdict: "+verdict, 60) {
		p.Legend = append(p.Legend, Line{Text: l})
	}
	p.Legend = append(p.Legend,
		Line{Text: fmt.Sprintf("%d rows move, %d stay (dimmed)", moved, len(n.Rows)-moved)},
		Line{Swatch: AtRisk, Text: fmt.Sprintf("%d rows at risk: an earlier primary in no hop", risk)})
	for i, b := range n.Backends {
		if gained[i] > 0 {
			p.Legend = append(p.Legend, Line{pal.Color(b.IP), fmt.Sprintf("%s takes %d rows", b.IP, gained[i])})
		}
	}
	// And the backends the rows move from (a drained one, say), with
	// what became of them.
	lost := make([]int, len(o.Backends))
	for r, row := range o.Rows {
		if o.Backends[row.Primary].IP != n.Backends[n.Rows[r].Primary].IP {
			lost[row.Primary]++
		}
	}
	now := map[netip.Addr]table.Backend{}
	for _, b := range n.Backends {
		now[b.IP] = b
	}
	for i, b := range o.Backends {
		if lost[i] == 0 {
			continue
		}
		what := "removed"
		if nb, ok := now[b.IP]; ok {
			what = nb.State.String()
			if !nb.Healthy {
				what += ", unhealthy"
			}
		}
		p.Legend = append(p.Legend, Line{Dim(pal.Color(b.IP)), fmt.Sprintf("%s gives up %d rows (%s)", b.IP, lost[i], what)})
	}
	return p
}

// AddedPanel and RemovedPanel are a table only one side of a change has.
func AddedPanel(name string, n *table.Table, pal *Palette) Panel {
	p := TablePanel(name, n, pal)
	p.Title = name + "  added"
	p.Legend = append([]Line{{Text: "verdict: table added"}}, p.Legend...)
	return p
}

func RemovedPanel(name string, o *table.Table) Panel {
	p := Panel{Title: name + "  removed", Cells: make([]uint16, len(o.Rows)), Colors: []color.RGBA{Empty}}
	p.Legend = []Line{{Text: "verdict: table removed: its VIPs are no longer steered"}}
	return p
}

// HotRows is how many of the busiest rows a heat panel marks and lists.
const HotRows = 16

// HeatPanel draws packets per row (counts, one per row of t), the
// HotRows busiest rows ringed and listed with their primary and their
// colour: nothing is at risk, so the frame is not red.
func HeatPanel(name string, t *table.Table, counts []uint64) Panel {
	p := Panel{Title: name + "  packets per row", Cells: make([]uint16, len(counts))}
	var most, total uint64
	for _, n := range counts {
		most = max(most, n)
		total += n
	}
	// The ramp in HeatLevels steps: a picture's colours stay few.
	for l := 0; l <= HeatLevels; l++ {
		p.Colors = append(p.Colors, heatLevel(l))
	}
	// Each step's smallest count, found once, so that a row is a few
	// compares and not a logarithm (a third of the panel's time).
	var from [HeatLevels + 2]uint64 // from[l]: the least n of step l or above
	for l := 1; l <= HeatLevels+1; l++ {
		lo, hi := uint64(1), most+1
		for lo < hi {
			mid := lo + (hi-lo)/2
			if HeatIndex(mid, most) >= l {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		from[l] = lo
	}
	for r, n := range counts {
		lo, hi := 0, HeatLevels // the step: the last l with from[l] <= n
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if n >= from[mid] {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		p.Cells[r] = uint16(lo)
	}
	// The busiest rows, kept in order as the rows go by (a sort of all
	// 65,536 a table is most of a heat map's cost).
	order, used := make([]int, 0, HotRows+1), 0
	for r, n := range counts {
		if n == 0 {
			continue
		}
		used++
		if len(order) == HotRows && counts[order[HotRows-1]] >= n {
			continue
		}
		lo, hi := 0, len(order) // where it goes: after every row with as many or more
		for lo < hi {
			mid := (lo + hi) / 2
			if counts[order[mid]] >= n {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		order = slices.Insert(order, lo, r)
		if len(order) > HotRows {
			order = order[:HotRows]
		}
	}
	p.Legend = append(p.Legend, Line{Text: fmt.Sprintf("%d packets on %d rows; busiest %d", total, used, most)},
		Line{Swatch: Heat(1, most), Text: "1 packet"}, Line{Swatch: Heat(most, most), Text: fmt.Sprintf("%d packets", most)})
	for _, r := range order {
		p.Rings = append(p.Rings, r)
		who := ""
		if t != nil && r < len(t.Rows) {
			who = " -> " + t.Backends[t.Rows[r].Primary].IP.String()
		}
		p.Legend = append(p.Legend, Line{p.Color(r), fmt.Sprintf("row %#04x: %d packets%s", r, counts[r], who)})
	}
	return p
}

// PaletteFor is the palette of every backend of tables (nil ones
// skipped): one picture's tables share it, so that an address has one
// colour in all its panels.
func PaletteFor(tables ...*table.Table) *Palette {
	var addrs []netip.Addr
	for _, t := range tables {
		if t == nil {
			continue
		}
		for _, b := range t.Backends {
			addrs = append(addrs, b.IP)
		}
	}
	return NewPalette(addrs)
}

// wrap breaks s into lines of at most width bytes, at spaces where it can.
func wrap(s string, width int) []string {
	var out []string
	for len(s) > width {
		cut := strings.LastIndexByte(s[:width], ' ')
		if cut <= 0 {
			cut = width
		}
		out = append(out, s[:cut])
		s = "  " + strings.TrimLeft(s[cut:], " ")
	}
	return append(out, s)
}
