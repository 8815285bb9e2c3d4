package picture

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"hash/adler32"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/director/director/internal/lab/golden"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

func build(t testing.TB, path string) []*table.Table {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", path))
	if err != nil {
		t.Fatal(err)
	}
	return buildJSON(t, data)
}

func buildJSON(t testing.TB, data []byte) []*table.Table {
	t.Helper()
	c, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return tabs
}

// TestPalette: 256 addresses get 256 colours, none of them the red kept
// for marks, and an address keeps its colour in another palette where no
// other address wants its slot.
func TestPalette(t *testing.T) {
	var addrs []netip.Addr
	for i := 0; i < Slots; i++ {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 1, byte(i / 200), byte(i % 200)}))
	}
	p := NewPalette(addrs)
	seen := map[color.RGBA]netip.Addr{}
	for _, a := range addrs {
		c := p.Color(a)
		if o, dup := seen[c]; dup {
			t.Fatalf("%s and %s share %v", a, o, c)
		}
		if c == AtRisk || c.R > 0xd0 && c.G < 0x40 && c.B < 0x40 {
			t.Fatalf("%s is red (%v), the marks' colour", a, c)
		}
		seen[c] = a
	}
	one := NewPalette(addrs[:1])
	if one.Color(addrs[0]) != SlotColor(preferred(addrs[0])) {
		t.Error("a lone address does not get its preferred slot")
	}
	if one.Color(addrs[0]) != NewPalette([]netip.Addr{addrs[0], netip.MustParseAddr("2001:db8::1")}).Color(addrs[0]) &&
		preferred(addrs[0]) != preferred(netip.MustParseAddr("2001:db8::1")) {
		t.Error("an address changed colour when another with a different slot joined")
	}
}

// cellAt is the colour of row r in img, the panel drawn at x0.
func cellAt(img interface{ At(x, y int) color.Color }, x0, r int) color.RGBA {
	g := image0()
	c := img.At(x0+g.X+(r%Side)*Cell+1, g.Y+(r/Side)*Cell+1)
	return color.RGBAModel.Convert(c).(color.RGBA)
}

func image0() struct{ X, Y int } { return struct{ X, Y int }{margin, margin + titleH} }

// drawn is p as WritePNG draws it, decoded back.
func drawn(t *testing.T, p Panel) image.Image {
	t.Helper()
	var buf bytes.Buffer
	if err := WritePNG(&buf, []Panel{p}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// describe is the golden form of a panel: its title, legend and the
// colours of a few rows, as drawn in the PNG (decoded back).
func describe(t *testing.T, p Panel, rows ...int) string {
	img := drawn(t, p)
	var b strings.Builder
	fmt.Fprintf(&b, "title: %s\nalarm: %v\n", p.Title, p.Alarm)
	for _, l := range p.Legend {
		sw := "      -"
		if l.Swatch.A != 0 {
			sw = hex(l.Swatch)
		}
		fmt.Fprintf(&b, "legend %s %s\n", sw, l.Text)
	}
	for _, r := range rows {
		drawn := cellAt(img, 0, r)
		if drawn != p.Color(r) {
			t.Errorf("row %#x drawn %v, want %v", r, drawn, p.Color(r))
		}
		fmt.Fprintf(&b, "row %#04x %s\n", r, hex(drawn))
	}
	return b.String()
}

// TestTablePicture: each row in its primary's colour, the legend each
// backend's share, state and health.
func TestTablePicture(t *testing.T) {
	tabs := build(t, "small-weighted.json")
	pal := PaletteFor(tabs...)
	p := TablePanel("api", tabs[0], pal)
	for r, row := range tabs[0].Rows {
		if p.Color(r) != pal.Color(tabs[0].Backends[row.Primary].IP) {
			t.Fatalf("row %d is not its primary's colour", r)
		}
	}
	golden.Check(t, "picture-table.txt", []byte(describe(t, p, 0, 1, 2, 0xff, 0x100, 0xffff)))
}

// TestChangePicture: a backend removed without a drain, from a table with
// GLB's two hops (history_hops false). Its rows move, those whose new
// secondary is not their old primary are at risk, in red, as many as diff
// counts; the rows that stay are dimmed.
func TestChangePicture(t *testing.T) {
	o, n := build(t, "small.json")[0], build(t, "small-removed.json")[0]
	n.History.NoHops = true
	pal := PaletteFor(o, n)
	d := table.Compare([]*table.Table{o}, []*table.Table{n}).Tables[0]
	p := ChangePanel("api", o, n, d.RowsAtRisk, pal, "UNSAFE")
	red, dim, first := 0, 0, -1
	for r := range p.Cells {
		switch p.Color(r) {
		case AtRisk:
			red++
			if first < 0 {
				first = r
			}
		case Dim(pal.Color(n.Backends[n.Rows[r].Primary].IP)):
			dim++
		}
	}
	if red == 0 || red != d.Rows.AtRisk || !p.Alarm {
		t.Fatalf("%d rows drawn at risk, diff says %d (alarm %v)", red, d.Rows.AtRisk, p.Alarm)
	}
	if dim != len(n.Rows)-d.Rows.PrimaryChanged {
		t.Fatalf("%d rows dimmed, %d kept their primary", dim, len(n.Rows)-d.Rows.PrimaryChanged)
	}
	golden.Check(t, "picture-change.txt", []byte(describe(t, p, 0, 1, 2, first, 0xffff)))
}

// TestHeatPicture: rows coloured by packets, the busiest ringed and
// listed with their primary and their own colour.
func TestHeatPicture(t *testing.T) {
	tab := build(t, "small.json")[0]
	counts := make([]uint64, len(tab.Rows))
	for r := range counts {
		counts[r] = uint64(r % 7)
	}
	counts[0x1234] = 1000
	p := HeatPanel("api", tab, counts)
	if p.Rings[0] != 0x1234 || p.Legend[3].Swatch != Heat(1000, 1000) || !strings.Contains(p.Legend[3].Text, "row 0x1234: 1000 packets -> ") {
		t.Fatalf("the busiest row is not marked first: rings %v, %v", p.Rings, p.Legend[3])
	}
	if p.Color(0) != Heat(0, 1000) || p.Color(7) != Heat(0, 1000) {
		t.Fatal("an empty row is not black")
	}
	golden.Check(t, "picture-heat.txt", []byte(describe(t, p, 0, 1, 6, 0x1234)))
}

// TestMarksAreSeen (issue 47, item 13): a change's moved rows stand out
// from the rows that stay (3:1, WCAG's contrast for graphics, between any
// slot colour and any dimmed one); a heat map is not framed in the red
// of rows at risk, and its busiest rows are ringed with their colour
// left showing, so the legend's top colour is seen in the grid.
func TestMarksAreSeen(t *testing.T) {
	for s := range Slots {
		for u := range Slots {
			if c := Contrast(SlotColor(s), Dim(SlotColor(u))); c < 3 {
				t.Fatalf("slot %d's colour %s against slot %d dimmed %s: contrast %.2f", s, hex(SlotColor(s)), u, hex(Dim(SlotColor(u))), c)
			}
		}
		if c := Contrast(AtRisk, Dim(SlotColor(s))); c < 3 {
			t.Fatalf("at risk against slot %d dimmed: contrast %.2f", s, c)
		}
	}
	counts := make([]uint64, Side*Side)
	counts[0x0505] = 9 // the busiest, away from the grid's edge
	counts[0x0101] = 1
	p := HeatPanel("x", nil, counts)
	img := drawn(t, p)
	at := func(x, y int) color.RGBA { return color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) }
	g := image0()
	if p.Alarm || at(g.X-3, g.Y-3) == AtRisk {
		t.Error("a heat map is framed in the at-risk red")
	}
	if got := cellAt(img, 0, 0x0505); got != Heat(9, 9) || p.Legend[len(p.Legend)-2].Swatch != got {
		t.Errorf("the busiest row is drawn %s, listed %s; its colour is %s", hex(got), hex(p.Legend[len(p.Legend)-2].Swatch), hex(Heat(9, 9)))
	}
	x, y := g.X+5*Cell, g.Y+5*Cell // row 0x0505's cell
	if at(x-3, y) != Ring || at(x-4, y) != ink || at(x+Cell+2, y+1) != Ring || at(x+Cell+3, y+1) != ink {
		t.Errorf("the busiest row's ring: %s %s | %s %s", hex(at(x-4, y)), hex(at(x-3, y)), hex(at(x+Cell+2, y+1)), hex(at(x+Cell+3, y+1)))
	}
}

// TestSVG: the SVG has every legend line, the frame, and the grid.
func TestSVG(t *testing.T) {
	o, n := build(t, "small.json")[0], build(t, "small-removed.json")[0]
	pal := PaletteFor(o, n)
	var b bytes.Buffer
	if err := Write(&b, "x.svg", []Panel{TablePanel("api", o, pal), ChangePanel("api", o, n, nil, pal, "UNSAFE")}); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{"<svg ", "192.168.50.10", "rows at risk", `fill="#ff0000"`, "data:image/png;base64,", "-&gt;"} {
		if !strings.Contains(s, want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	if err := Write(&b, "x.jpg", nil); err == nil {
		t.Error("a .jpg was written")
	}
}

// bigTables is 32 tables of 256 backends.
func bigTables(t testing.TB) []*table.Table { return bigTablesDown(t, -1) }

// bigTablesDown is bigTables with the first table's backend down
// unhealthy.
func bigTablesDown(t testing.TB, down int) []*table.Table {
	var b strings.Builder
	b.WriteString(`{"tables": [`)
	for i := 0; i < 32; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name": "t%d", "hash_key": "%032x", "seed": "%032x", "binds": [{"ip": "10.200.%d.1", "proto": "tcp", "port": 80}], "backends": [`, i, i+1, i+100, i)
		for j := 0; j < 256; j++ {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"ip": "10.%d.%d.%d", "state": "active", "healthy": %v}`, 100+i, j/200, j%200+1, i != 0 || j != down)
		}
		b.WriteString("]}")
	}
	b.WriteString("]}")
	return buildJSON(t, []byte(b.String()))
}

// BenchmarkPicture draws 32 tables of 256 backends side by side, as
// 'show --picture' does, in each format.
//
//	go test ./internal/picture -run '^$' -bench Picture
func BenchmarkPicture(b *testing.B) {
	tabs := bigTables(b)
	for _, format := range []string{"png", "svg"} {
		b.Run(format, func(b *testing.B) {
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				pal := PaletteFor(tabs...)
				panels := Panels(len(tabs), func(i int) Panel { return TablePanel(fmt.Sprint("t", i), tabs[i], pal) })
				if err := Write(&buf, "x."+format, panels); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len())/1e6, "MB")
		})
	}
	// A change to one table of the 32 (what diff and plan draw: the
	// tables that changed), and the 32 tables' heat maps (replay).
	changed := bigTablesDown(b, 3)[0]
	counts := make([]uint64, len(tabs[0].Rows))
	for r := range counts {
		counts[r] = uint64(r) * 0x9E3779B97F4A7C15 >> 54 // 0 to 1023, scattered
	}
	for _, k := range []struct {
		name   string
		panels func() []Panel
	}{
		{"change", func() []Panel {
			return []Panel{ChangePanel("t0", tabs[0], changed, nil, PaletteFor(tabs[0], changed), "safe")}
		}},
		{"heat", func() []Panel {
			return Panels(len(tabs), func(i int) Panel { return HeatPanel(fmt.Sprint("t", i), tabs[i], counts) })
		}},
	} {
		b.Run(k.name, func(b *testing.B) {
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := WritePNG(&buf, k.panels()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len())/1e6, "MB")
		})
	}
}

// TestTruecolourPicture: a table of 256 backends needs 256 colours and
// the legend's two: more than a paletted PNG holds, so the picture is
// written as RGB by writeRGB. It decodes, every row in its colour.
func TestTruecolourPicture(t *testing.T) {
	tab := bigTables(t)[0]
	p := TablePanel("t0", tab, PaletteFor(tab))
	var buf bytes.Buffer
	if err := WritePNG(&buf, []Panel{p}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, paletted := img.(interface{ ColorIndexAt(x, y int) uint8 }); paletted {
		t.Fatal("a picture of 258 colours was written paletted")
	}
	seen := map[color.RGBA]bool{}
	for r := range tab.Rows {
		if got := cellAt(img, 0, r); got != p.Color(r) {
			t.Fatalf("row %d drawn %v, want %v", r, got, p.Color(r))
		}
		seen[p.Color(r)] = true
	}
	if len(seen) != 256 {
		t.Fatalf("%d colours among 256 backends' rows", len(seen))
	}
}

// TestHeatSteps: the panel's steps are HeatIndex's, row by row.
func TestHeatSteps(t *testing.T) {
	for _, most := range []uint64{1, 2, 7, 1000, 1 << 40} {
		counts := make([]uint64, 4096)
		for r := range counts {
			counts[r] = uint64(r*r*7919) % (most + 1)
		}
		counts[0] = most
		p := HeatPanel("x", nil, counts)
		for r, n := range counts {
			if p.Cells[r] != uint16(HeatIndex(n, most)) {
				t.Fatalf("max %d: row %d (%d packets) at step %d, want %d", most, r, n, p.Cells[r], HeatIndex(n, most))
			}
		}
	}
}

// TestAdler32Combine: the combined checksum is the checksum of the whole,
// for splits anywhere, empty parts included.
func TestAdler32Combine(t *testing.T) {
	data := make([]byte, 200000)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	for _, at := range []int{0, 1, 65520, 65521, 65522, 100000, len(data)} {
		a, b := data[:at], data[at:]
		if got, want := adler32Combine(adler32.Checksum(a), adler32.Checksum(b), int64(len(b))), adler32.Checksum(data); got != want {
			t.Errorf("split at %d: %08x, want %08x", at, got, want)
		}
	}
}

// TestRGBStreamIsWhole: the striped IDAT is one zlib stream that a strict
// reader takes to its end, checksum and all, with every line's bytes.
func TestRGBStreamIsWhole(t *testing.T) {
	tabs := bigTables(t)[:3]
	pal := PaletteFor(tabs...)
	panels := Panels(len(tabs), func(i int) Panel { return TablePanel(fmt.Sprint("t", i), tabs[i], pal) })
	c := draw(panels)
	for _, procs := range []int{1, 2, 5} {
		old := runtime.GOMAXPROCS(procs)
		z, err := compressLines(c, nil)
		runtime.GOMAXPROCS(old)
		if err != nil {
			t.Fatal(err)
		}
		r, err := zlib.NewReader(bytes.NewReader(z))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(r) // io.EOF only once the Adler-32 matched
		if err != nil {
			t.Fatalf("GOMAXPROCS %d: %v", procs, err)
		}
		if len(raw) != c.h*(1+3*c.w) {
			t.Fatalf("GOMAXPROCS %d: %d bytes, want %d", procs, len(raw), c.h*(1+3*c.w))
		}
		// Every pixel, unfiltered, is the canvas's.
		stride := 1 + 3*c.w
		for y := 0; y < c.h; y++ {
			line := raw[y*stride : (y+1)*stride]
			for x := 0; x < c.w; x++ {
				px := [3]byte(line[1+3*x : 4+3*x])
				switch line[0] {
				case 0:
				case 2: // Up
					above := raw[(y-1)*stride:]
					for j := range px {
						px[j] += above[1+3*x+j]
					}
					copy(line[1+3*x:], px[:])
				default:
					t.Fatalf("line %d: filter %d", y, line[0])
				}
				if col := c.pal[c.pix[y*c.w+x]]; px != [3]byte{col.R, col.G, col.B} {
					t.Fatalf("GOMAXPROCS %d: pixel (%d, %d) is %v, the canvas has %v", procs, x, y, px, col)
				}
			}
		}
	}
}

// TestWindowedPNGIsTheWholePicture: a picture of more than 256 colours,
// drawn and written a window of lines at a time, is pixel for pixel the
// picture drawn whole.
func TestWindowedPNGIsTheWholePicture(t *testing.T) {
	tabs := bigTables(t)[:3]
	pal := PaletteFor(tabs...)
	panels := Panels(len(tabs), func(i int) Panel { return TablePanel(fmt.Sprint("t", i), tabs[i], pal) })
	want := draw(panels)
	if len(want.pal) <= 256 {
		t.Fatal("the picture is paletted: the test tests nothing")
	}
	for _, procs := range []int{1, 3} {
		old := runtime.GOMAXPROCS(procs)
		var buf bytes.Buffer
		err := WritePNG(&buf, panels)
		runtime.GOMAXPROCS(old)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if b := img.Bounds(); b.Dx() != want.w || b.Dy() != want.h {
			t.Fatalf("%v, want %dx%d", b, want.w, want.h)
		}
		for y := 0; y < want.h; y++ {
			for x := 0; x < want.w; x++ {
				r, g, b, _ := img.At(x, y).RGBA()
				col := want.pal[want.pix[y*want.w+x]]
				if uint8(r>>8) != col.R || uint8(g>>8) != col.G || uint8(b>>8) != col.B {
					t.Fatalf("GOMAXPROCS %d: pixel (%d, %d) differs from the whole picture's", procs, x, y)
				}
			}
		}
	}
}

// TestLegendAtCap: with a balance factor the legend says which backends
// are at their cap, and only those.
func TestLegendAtCap(t *testing.T) {
	tc := &table.TableConfig{Name: "b", Balance: 1010}
	for i := 1; i <= 30; i++ {
		tc.Backends = append(tc.Backends, table.Backend{IP: netip.AddrFrom4([4]byte{10, 7, 0, byte(i)}), State: table.StateActive, Healthy: true})
	}
	tab, err := table.Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	caps := table.Caps(tab.Backends, tab.Balance)
	prim := make([]int, len(tab.Backends))
	for _, r := range tab.Rows {
		prim[r.Primary]++
	}
	p := TablePanel("b", tab, PaletteFor(tab))
	at := 0
	for i, b := range tab.Backends {
		line := p.Legend[i+2].Text // after the heading and the factor's line
		if !strings.HasPrefix(line, b.IP.String()+" ") {
			t.Fatalf("legend line %q is not %s's", line, b.IP)
		}
		if want := prim[i] >= caps[i]; strings.HasSuffix(line, " at cap") != want {
			t.Errorf("%q: %d rows, cap %d", line, prim[i], caps[i])
		} else if want {
			at++
		}
	}
	if at == 0 {
		t.Error("no backend at its cap: the test tests nothing")
	}
}

// TestRunLen: the word-at-a-time run length is the pixel-at-a-time one.
func TestRunLen(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		line := make([]uint16, 1+rng.IntN(40))
		for i := range line {
			line[i] = uint16(rng.IntN(3))
		}
		x := rng.IntN(len(line))
		want := 1
		for x+want < len(line) && line[x+want] == line[x] {
			want++
		}
		if got := runLen(line, x); got != want {
			t.Fatalf("runLen(%v, %d) = %d, want %d", line, x, got, want)
		}
	}
}

// TestChangePictureNamesWhoGivesUpRows: a drain's picture names the
// drained backend and how many rows it gives up, as well as who takes
// them; a removed backend is said to be removed.
func TestChangePictureNamesWhoGivesUpRows(t *testing.T) {
	o := build(t, "small.json")[0]
	for _, c := range []struct{ cfg, want string }{
		{"small-draining.json", "192.168.50.11 gives up 16392 rows (draining)"},
		{"small-removed.json", "gives up"},
	} {
		n := build(t, c.cfg)[0]
		p := ChangePanel("api", o, n, nil, PaletteFor(o, n), "safe")
		var legend []string
		for _, l := range p.Legend {
			legend = append(legend, l.Text)
		}
		all := strings.Join(legend, "\n")
		if !strings.Contains(all, c.want) || strings.Count(all, "gives up") != 1 {
			t.Errorf("%s: the legend does not name who gives up rows:\n%s", c.cfg, all)
		}
	}
}

// TestSVGTextStaysInside: every text of an SVG picture is pinned to the
// width its column was given, so that however wide a viewer's monospace
// font is, no legend runs past its column or the picture's edge: here a
// table of 256 backends with long domain names, and a long verdict.
func TestSVGTextStaysInside(t *testing.T) {
	var bs []string
	for i := 0; i < 256; i++ {
		bs = append(bs, fmt.Sprintf(`{"ip": "10.9.%d.%d", "state": "active", "healthy": true, "domain": "a-rather-long-failure-domain-name-%03d"}`, i/200, i%200+1, i%7))
	}
	tabs := buildJSON(t, []byte(`{"tables": [{"name": "wide", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
	  "binds": [{"ip": "10.20.0.1", "proto": "tcp", "port": 80}], "backends": [`+strings.Join(bs, ", ")+`]}]}`))
	pal := PaletteFor(tabs...)
	panels := []Panel{TablePanel("wide", tabs[0], pal), ChangePanel("wide", tabs[0], tabs[0], nil, pal, strings.Repeat("UNSAFE: a long reason; ", 8))}
	var b bytes.Buffer
	if err := WriteSVG(&b, panels); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	var width int
	fmt.Sscanf(svg[strings.Index(svg, `width="`):], `width="%d"`, &width)
	texts := 0
	for _, el := range strings.Split(svg, "<text ")[1:] {
		texts++
		var x, y, length int
		if _, err := fmt.Sscanf(el, `x="%d" y="%d"`, &x, &y); err != nil {
			t.Fatalf("a text without its place: %.60s", el)
		}
		i := strings.Index(el, `textLength="`)
		if i < 0 {
			t.Fatalf("a text not pinned to its width: %.80s", el)
		}
		fmt.Sscanf(el[i:], `textLength="%d"`, &length)
		body := el[strings.Index(el, ">")+1 : strings.Index(el, "</text>")]
		if length != len([]rune(body))*charW && !strings.Contains(body, "&") {
			t.Errorf("text %q pinned to %d px, not %d", body, length, len([]rune(body))*charW)
		}
		if x+length > width {
			t.Errorf("text %q ends at %d, past the picture's %d", body, x+length, width)
		}
	}
	if texts < 256 {
		t.Fatalf("%d texts", texts)
	}
}
