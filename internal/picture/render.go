package picture

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Layout, in pixels. A row is a Cell×Cell square; the legend runs in
// columns of at most LegendRows lines under the grid.
const (
	Cell       = 2
	margin     = 10
	lineH      = 15
	titleH     = 20
	LegendRows = 64
	charW      = 7 // basicfont.Face7x13's advance
	swatchW    = 10
)

var (
	background = color.RGBA{0xff, 0xff, 0xff, 0xff}
	ink        = color.RGBA{0x20, 0x20, 0x20, 0xff}
)

// geometry is where a panel's parts go.
type geometry struct {
	w, h      int
	grid      image.Point // the grid's top left
	legendTop int
	colX      []int // each legend column's left, from the legend's
	cols      int
}

func (p *Panel) geometry() geometry {
	g := geometry{grid: image.Pt(margin, margin+titleH)}
	g.cols = (len(p.Legend) + LegendRows - 1) / LegendRows
	g.colX = make([]int, g.cols+1)
	for col := 0; col < g.cols; col++ {
		longest := 0
		for _, l := range p.Legend[col*LegendRows : min(len(p.Legend), (col+1)*LegendRows)] {
			longest = max(longest, len(l.Text))
		}
		g.colX[col+1] = g.colX[col] + swatchW + 6 + longest*charW + margin
	}
	rows := min(len(p.Legend), LegendRows)
	g.legendTop = g.grid.Y + Side*Cell + margin
	g.w = max(Side*Cell+2*margin, margin+len(p.Title)*charW+margin, margin+g.colX[g.cols])
	g.h = g.legendTop + rows*lineH + margin
	return g
}

// A canvas is a picture being drawn: a colour index a pixel, so that it
// can be written as a paletted PNG (8 bits a pixel, unfiltered: the PNG
// encoder's filter search is most of an RGBA picture's cost) when it has
// 256 colours or fewer.
type canvas struct {
	w, h int
	// pix holds lines y0 to y1 (not included) of the picture: all of it,
	// or a window of it being drawn and written at once (writeRGB).
	y0, y1 int
	pix    []uint16
	pal    []color.RGBA
	index  map[color.RGBA]uint16
	// frozen is set while panels are drawn at once: index is read only.
	frozen bool
}

func newCanvas(w, h int) *canvas {
	c := &canvas{w: w, h: h, y1: h, pix: make([]uint16, w*h), index: map[color.RGBA]uint16{}}
	c.idx(background) // index 0: what pix starts as
	return c
}

// window is a canvas of lines y0 to y1 of c's picture, with c's palette,
// which must be frozen; its pixels in buf when it is large enough.
func (c *canvas) window(y0, y1 int, buf []uint16) *canvas {
	n := c.w * (y1 - y0)
	if cap(buf) >= n {
		buf = buf[:n]
		clear(buf)
	} else {
		buf = make([]uint16, n)
	}
	return &canvas{w: c.w, h: c.h, y0: y0, y1: y1, pix: buf, pal: c.pal, index: c.index, frozen: true}
}

// line is line y's pixels.
func (c *canvas) line(y int) []uint16 { return c.pix[(y-c.y0)*c.w : (y-c.y0+1)*c.w] }

func (c *canvas) idx(col color.RGBA) uint16 {
	i, ok := c.index[col]
	if !ok {
		if c.frozen {
			panic("picture: a colour not indexed before the panels were drawn")
		}
		i = uint16(len(c.pal))
		c.pal = append(c.pal, col)
		c.index[col] = i
	}
	return i
}

// indexAll is each of cols's index.
func (c *canvas) indexAll(cols []color.RGBA) []uint16 {
	at := make([]uint16, len(cols))
	for i, col := range cols {
		at[i] = c.idx(col)
	}
	return at
}

func (c *canvas) fill(r image.Rectangle, col color.RGBA) {
	r = r.Intersect(image.Rect(0, c.y0, c.w, c.y1))
	if r.Empty() {
		return
	}
	i := c.idx(col)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		row := c.line(y)[r.Min.X:r.Max.X]
		for x := range row {
			row[x] = i
		}
	}
}

// glyphs are basicfont.Face7x13's printable ASCII glyphs, as the pixels
// each sets, from its top left.
var glyphs = func() (g [128][]image.Point) {
	f := basicfont.Face7x13
	for r := rune(32); r < 127; r++ {
		dr, mask, mp, _, ok := f.Glyph(fixed.P(0, f.Ascent), r)
		if !ok {
			continue
		}
		for y := 0; y < dr.Dy(); y++ {
			for x := 0; x < dr.Dx(); x++ {
				if _, _, _, a := mask.At(mp.X+x, mp.Y+y).RGBA(); a > 0x8000 {
					g[r] = append(g[r], image.Pt(dr.Min.X+x, dr.Min.Y+y))
				}
			}
		}
	}
	return g
}()

// text writes s with its baseline at y.
func (c *canvas) text(x, y int, s string) {
	i := c.idx(ink)
	top := y - basicfont.Face7x13.Ascent
	if top+basicfont.Face7x13.Height <= c.y0 || top >= c.y1 {
		return // outside the window
	}
	for _, r := range s {
		if r < 128 {
			for _, p := range glyphs[r] {
				px, py := x+p.X, top+p.Y
				if px >= 0 && px < c.w && py >= c.y0 && py < c.y1 {
					c.pix[(py-c.y0)*c.w+px] = i
				}
			}
		}
		x += charW
	}
}

// image is the canvas as an image: paletted when it can be.
func (c *canvas) image() image.Image {
	if len(c.pal) <= 256 {
		pal := make(color.Palette, len(c.pal))
		for i, col := range c.pal {
			pal[i] = col
		}
		img := image.NewPaletted(image.Rect(0, 0, c.w, c.h), pal)
		for i, v := range c.pix {
			img.Pix[i] = uint8(v)
		}
		return img
	}
	img := image.NewRGBA(image.Rect(0, 0, c.w, c.h))
	for i, v := range c.pix {
		col := c.pal[v]
		img.Pix[4*i], img.Pix[4*i+1], img.Pix[4*i+2], img.Pix[4*i+3] = col.R, col.G, col.B, 0xff
	}
	return img
}

// Image draws panels side by side.
func Image(panels []Panel) image.Image { return draw(panels).image() }

// layout places panels side by side: each one's geometry and left edge,
// and the picture's size. Both writers draw from it.
func layout(panels []Panel) (gs []geometry, xs []int, w, h int) {
	gs, xs = make([]geometry, len(panels)), make([]int, len(panels))
	for i := range panels {
		gs[i] = panels[i].geometry()
		xs[i] = w
		w += gs[i].w
		h = max(h, gs[i].h)
	}
	return gs, xs, max(w, 1), max(h, 1)
}

func draw(panels []Panel) *canvas {
	gs, xs, w, h := layout(panels)
	c := paletteCanvas(panels, w, h)
	c.y1, c.pix = h, make([]uint16, w*h)
	// The panels, which share no pixels, are drawn at once, one
	// goroutine a CPU.
	parallel(len(panels), func(i int) { drawPanel(c, xs[i], &panels[i], gs[i]) })
	return c
}

// paletteCanvas is a canvas of w×h holding no pixels yet, every colour of
// the panels indexed and the palette frozen, so that it can be drawn in
// at once.
func paletteCanvas(panels []Panel, w, h int) *canvas {
	c := &canvas{w: w, h: h, index: map[color.RGBA]uint16{}}
	c.idx(background) // index 0: what pix starts as
	for _, col := range []color.RGBA{ink, AtRisk, Ring} {
		c.idx(col)
	}
	for i := range panels {
		c.indexAll(panels[i].Colors)
		for _, l := range panels[i].Legend {
			if l.Swatch.A != 0 {
				c.idx(l.Swatch)
			}
		}
	}
	c.frozen = true
	return c
}

// parallel calls f(0) to f(n-1), on as many goroutines as there are CPUs.
func parallel(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// Panels is build(0) to build(n-1), built at once, one goroutine a CPU.
func Panels(n int, build func(i int) Panel) []Panel {
	out := make([]Panel, n)
	parallel(n, func(i int) { out[i] = build(i) })
	return out
}

func drawPanel(c *canvas, x0 int, p *Panel, g geometry) {
	c.text(x0+margin, margin+13, p.Title)
	gx, gy := x0+g.grid.X, g.grid.Y
	if p.Alarm {
		c.fill(image.Rect(gx-3, gy-3, gx+Side*Cell+3, gy+Side*Cell+3), AtRisk)
	}
	c.fill(image.Rect(gx-1, gy-1, gx+Side*Cell+1, gy+Side*Cell+1), ink)
	// The cells: the panel's colours indexed once, then a slice index a
	// row, straight into the pixels.
	at := c.indexAll(p.Colors)
	for y := max(gy, c.y0); y < min(gy+Side*Cell, c.y1); y++ {
		lo := (y - gy) / Cell * Side
		cells := p.Cells[min(lo, len(p.Cells)):min(lo+Side, len(p.Cells))]
		row := c.line(y)[gx : gx+len(cells)*Cell]
		for j, ci := range cells {
			v := at[ci]
			for dx := range Cell {
				row[j*Cell+dx] = v
			}
		}
	}
	grid := image.Rect(gx, gy, gx+Side*Cell, gy+Side*Cell)
	for _, r := range p.Rings {
		x, y := gx+(r%Side)*Cell, gy+(r/Side)*Cell
		for k, col := range []color.RGBA{ink, Ring} { // ink outside, Ring inside
			o := image.Rect(x-4+k, y-4+k, x+Cell+4-k, y+Cell+4-k)
			for _, side := range []image.Rectangle{{o.Min, image.Pt(o.Max.X, o.Min.Y+1)}, {image.Pt(o.Min.X, o.Max.Y-1), o.Max},
				{o.Min, image.Pt(o.Min.X+1, o.Max.Y)}, {image.Pt(o.Max.X-1, o.Min.Y), o.Max}} {
				c.fill(side.Intersect(grid), col)
			}
		}
	}
	for i, l := range p.Legend {
		col, line := i/LegendRows, i%LegendRows
		lx, ly := x0+margin+g.colX[col], g.legendTop+line*lineH
		if l.Swatch.A != 0 {
			c.fill(image.Rect(lx, ly+2, lx+swatchW, ly+2+swatchW), l.Swatch)
		}
		c.text(lx+swatchW+6, ly+11, l.Text)
	}
}

// WritePNG writes panels as one PNG: paletted where the picture has 256
// colours or fewer, else RGB written by writeRGB.
func WritePNG(w io.Writer, panels []Panel) error {
	gs, xs, pw, ph := layout(panels)
	if pc := paletteCanvas(panels, pw, ph); len(pc.pal) > 256 {
		// Drawn a stripe of lines at a time as it is written: the whole
		// picture of 32 tables is 89 MB of indices.
		return writeRGB(w, pc, func(win *canvas) {
			for i := range panels {
				if xs[i] < win.w {
					drawPanel(win, xs[i], &panels[i], gs[i])
				}
			}
		})
	}
	c := draw(panels)
	e := png.Encoder{CompressionLevel: png.BestSpeed}
	return e.Encode(w, c.image())
}

// writeRGB writes c as an 8-bit RGB PNG, each line unfiltered or, when it
// repeats the line above, filtered "Up" (all zeros), deflated by
// compressLines (deflate.go); with drawIn, c holds only the palette, and
// the lines are drawn a window at a time as they are written.
func writeRGB(w io.Writer, c *canvas, drawIn func(win *canvas)) error {
	b := image.Rect(0, 0, c.w, c.h)
	chunk := func(kind string, data []byte) error {
		var hdr [8]byte
		binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
		copy(hdr[4:], kind)
		crc := crc32.NewIEEE()
		crc.Write(hdr[4:])
		crc.Write(data)
		var sum [4]byte
		binary.BigEndian.PutUint32(sum[:], crc.Sum32())
		for _, part := range [][]byte{hdr[:], data, sum[:]} {
			if _, err := w.Write(part); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := io.WriteString(w, "\x89PNG\r\n\x1a\n"); err != nil {
		return err
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(b.Dx()))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(b.Dy()))
	ihdr[8], ihdr[9] = 8, 2 // 8 bits, truecolour; deflate, adaptive filters, no interlace
	if err := chunk("IHDR", ihdr); err != nil {
		return err
	}
	idat, err := compressLines(c, drawIn)
	if err != nil {
		return err
	}
	if err := chunk("IDAT", idat); err != nil {
		return err
	}
	return chunk("IEND", nil)
}

// adler32Combine is the Adler-32 of A then B, from A's, B's and B's
// length (zlib's adler32_combine).
func adler32Combine(a, b uint32, lenB int64) uint32 {
	const base = 65521
	rem := uint32(lenB % base)
	sum1 := a & 0xffff
	sum2 := rem * sum1 % base
	sum1 += b&0xffff + base - 1
	sum2 += a>>16 + b>>16 + base - rem
	if sum1 >= base {
		sum1 -= base
	}
	if sum1 >= base {
		sum1 -= base
	}
	if sum2 >= base<<1 {
		sum2 -= base << 1
	}
	if sum2 >= base {
		sum2 -= base
	}
	return sum2<<16 | sum1
}

// WriteSVG writes panels as SVG: the grids as one embedded PNG of a
// pixel per row, scaled up without smoothing (65,536 rows a table would
// be as many rectangles), the titles, frames and legends as SVG.
func WriteSVG(w io.Writer, panels []Panel) error {
	gs, xs, width, height := layout(panels)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="monospace" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	for i := range panels {
		p, g, x := &panels[i], gs[i], xs[i]
		gx, gy := x+g.grid.X, g.grid.Y
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s"%s>%s</text>`+"\n", x+margin, margin+13, hex(ink), textLength(p.Title), escape(p.Title))
		if p.Alarm {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", gx-3, gy-3, Side*Cell+6, Side*Cell+6, hex(AtRisk))
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", gx-1, gy-1, Side*Cell+2, Side*Cell+2, hex(ink))
		grid, err := gridPNG(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, `<image x="%d" y="%d" width="%d" height="%d" style="image-rendering:pixelated" href="data:image/png;base64,%s"/>`+"\n",
			gx, gy, Side*Cell, Side*Cell, base64.StdEncoding.EncodeToString(grid))
		for _, r := range p.Rings {
			x, y := gx+(r%Side)*Cell, gy+(r/Side)*Cell // a stroke is centred on the path: ink at 4 out, Ring at 3
			fmt.Fprintf(&b, `<rect x="%d.5" y="%d.5" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", x-4, y-4, Cell+7, Cell+7, hex(ink))
			fmt.Fprintf(&b, `<rect x="%d.5" y="%d.5" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", x-3, y-3, Cell+5, Cell+5, hex(Ring))
		}
		for i, l := range p.Legend {
			col, line := i/LegendRows, i%LegendRows
			lx, ly := x+margin+g.colX[col], g.legendTop+line*lineH
			if l.Swatch.A != 0 {
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, lx, ly+2, swatchW, swatchW, hex(l.Swatch))
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s"%s>%s</text>`+"\n", lx+swatchW+6, ly+11, hex(ink), textLength(l.Text), escape(l.Text))
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// textLength pins an SVG text to the width the layout gave it (charW a
// character): a viewer's monospace font at 12 px is a little wider (7.2 px
// for DejaVu Sans Mono), which took long legend lines past their column
// and the picture's edge.
func textLength(s string) string {
	return fmt.Sprintf(` textLength="%d" lengthAdjust="spacingAndGlyphs"`, utf8.RuneCountInString(s)*charW)
}

// gridPNG is p's grid at a pixel a row.
func gridPNG(p *Panel) ([]byte, error) {
	// No background: a table of 256 backends is 256 colours, and paletted.
	c := &canvas{w: Side, h: max(1, (len(p.Cells)+Side-1)/Side), index: map[color.RGBA]uint16{}}
	c.y1, c.pix = c.h, make([]uint16, c.w*c.h)
	at := c.indexAll(p.Colors)
	for r, ci := range p.Cells {
		c.pix[r] = at[ci]
	}
	img := c.image()
	var out bytes.Buffer
	e := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := e.Encode(&out, img); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// Write writes panels to w in the format path's extension names: .png or
// .svg.
func Write(w io.Writer, path string, panels []Panel) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png":
		return WritePNG(w, panels)
	case ".svg":
		return WriteSVG(w, panels)
	}
	return fmt.Errorf("%s: a picture is .png or .svg", path)
}

// CheckPath says whether path names a format Write knows, before any
// work is done for it.
func CheckPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png", ".svg":
		return nil
	}
	return fmt.Errorf("--picture %s: a picture is .png or .svg", path)
}

// WriteGridPNG writes p's grid alone, a pixel a row (256×256 for a
// table): the status page's picture, scaled up by the browser, its legend
// the page's own.
func WriteGridPNG(w io.Writer, p Panel) error {
	data, err := gridPNG(&p)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}
