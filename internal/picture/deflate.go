package picture

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"runtime"
	"unsafe"
)

// A PNG of many tables is large (32 tables of 256 backends: 29,344 ×
// 1,522 pixels, 134 MB of RGB) and almost all flat colour: a legend's
// background between its glyphs, a line drawn twice. compress/flate
// looks for matches byte by byte, which was three quarters of the
// picture's time. The canvas already knows where colour runs are (its
// pixels are palette indices), so the lines are deflated here from the
// runs themselves, with deflate's fixed Huffman codes (RFC 1951, 3.2.6):
// each run of one colour is its pixel's three bytes as literals and a
// match of the rest at distance 3; a line the same as the one above is
// filtered "Up" (all zeros: one literal and matches at distance 1). The
// Adler-32 is summed per run in closed form, not per byte. Stripes of
// lines are encoded at once, each ended by an empty stored block (a sync
// flush, byte-aligned), the last one final, so their concatenation is
// one deflate stream; the Adler-32 of the whole is combined from the
// stripes'.

// bitWriter writes deflate's bit stream, least significant bit first. A
// put takes up to 57 bits: what the accumulator holds is spilled, whole
// bytes at a time, only when the next put would not fit.
type bitWriter struct {
	out []byte
	acc uint64
	n   uint
}

func (w *bitWriter) put(v uint64, n uint) {
	if w.n+n > 64 {
		w.spill()
	}
	w.acc |= v << w.n
	w.n += n
}

// spill writes the accumulator's whole bytes.
func (w *bitWriter) spill() {
	w.out = binary.LittleEndian.AppendUint64(w.out, w.acc)
	k := w.n / 8
	w.out = w.out[:len(w.out)-8+int(k)]
	w.acc >>= 8 * k // all of it when k is 8: Go shifts a word out whole
	w.n -= 8 * k
}

// flush writes what is left, up to the next byte boundary.
func (w *bitWriter) flush() {
	w.spill()
	if w.n > 0 {
		w.out = append(w.out, byte(w.acc))
	}
	w.acc, w.n = 0, 0
}

// code is a Huffman code, bit-reversed for the stream, and its length.
type code struct {
	bits uint32
	n    uint8
}

func reversed(c, n int) code {
	return code{uint32(bits.Reverse32(uint32(c)) >> (32 - n)), uint8(n)}
}

// fixedLit are the fixed literal/length codes.
var fixedLit = func() (t [288]code) {
	for v := range t {
		switch {
		case v < 144:
			t[v] = reversed(0x30+v, 8)
		case v < 256:
			t[v] = reversed(0x190+v-144, 9)
		case v < 280:
			t[v] = reversed(v-256, 7)
		default:
			t[v] = reversed(0xc0+v-280, 8)
		}
	}
	return t
}()

// fixedLen[l] is a match length l's code and extra bits, as one code.
var fixedLen = func() (t [259]code) {
	base := []int{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	extra := []int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	for l := 3; l <= 258; l++ {
		i := len(base) - 1
		for base[i] > l {
			i--
		}
		c := fixedLit[257+i]
		t[l] = code{c.bits | uint32(l-base[i])<<c.n, c.n + uint8(extra[i])}
	}
	return t
}()

// Distances 1 and 3 (codes 0 and 2, no extra bits), as five reversed bits.
var (
	dist1 = reversed(0, 5)
	dist3 = reversed(2, 5)
)

const adlerMod = 65521

// runEncoder deflates one stripe and sums its Adler-32.
type runEncoder struct {
	bitWriter
	s1, s2 uint64 // Adler-32's two sums, reduced
	length int64  // bytes encoded
}

func (e *runEncoder) literal(b byte) {
	c := fixedLit[b]
	e.put(uint64(c.bits), uint(c.n))
}

// repeat encodes n more bytes repeating those dist back (dist 1 or 3; n a
// multiple of dist, or any n for dist 1).
func (e *runEncoder) repeat(n int, d code) {
	for n >= 3 {
		l := min(n, 258)
		if r := n - l; r > 0 && r < 3 {
			l = n - 3
		}
		c := fixedLen[l]
		e.put(uint64(c.bits)|uint64(d.bits)<<c.n, uint(c.n+d.n))
		n -= l
	}
	for ; n > 0; n-- {
		e.literal(0) // only for dist 1: the repeated byte is a zero
	}
}

// pixel is a colour as the encoder writes it: its three bytes' literal
// codes as one, and what they add to Adler-32's sums.
type pixel struct {
	lit  code
	s, t uint64 // the bytes' sum; 3, 2 and 1 times them
}

func pixelOf(col [3]byte) pixel {
	var lit code
	for _, b := range col {
		c := fixedLit[b]
		lit.bits |= c.bits << lit.n
		lit.n += c.n
	}
	return pixel{lit, uint64(col[0]) + uint64(col[1]) + uint64(col[2]), 3*uint64(col[0]) + 2*uint64(col[1]) + uint64(col[2])}
}

// pixels encodes k pixels of colour p, and sums them. The sums are
// reduced once a line (reduce): a line adds at most about 10^13 to s2.
func (e *runEncoder) pixels(p *pixel, k int) {
	switch {
	case k == 1:
		e.put(uint64(p.lit.bits), uint(p.lit.n))
	case k <= shortRun:
		m := shortRuns[k]
		e.put(uint64(p.lit.bits)|uint64(m.bits)<<p.lit.n, uint(p.lit.n+m.n))
	default:
		e.put(uint64(p.lit.bits), uint(p.lit.n))
		e.repeat(3*(k-1), dist3)
	}
	// s2 gains, for each of the 3k bytes, s1 after it.
	kk := uint64(k)
	e.s2 += 3*kk*e.s1 + 3*p.s*(kk*(kk-1)/2) + kk*p.t
	e.s1 += kk * p.s
	e.length += 3 * int64(k)
}

// shortRuns[k] is the match that repeats a pixel k-1 more times, for runs
// of up to shortRun pixels: one match, its length code, extra bits and
// distance as one code.
const shortRun = 87 // 3 × 86 = 258, the longest match

var shortRuns = func() (t [shortRun + 1]code) {
	for k := 2; k <= shortRun; k++ {
		l := fixedLen[3*(k-1)]
		t[k] = code{l.bits | dist3.bits<<l.n, l.n + dist3.n}
	}
	return t
}()

func (e *runEncoder) reduce() {
	e.s1 %= adlerMod
	e.s2 %= adlerMod
}

// filterByte encodes a line's filter type.
func (e *runEncoder) filterByte(b byte) {
	e.literal(b)
	e.s1 += uint64(b)
	e.s2 += e.s1
	e.length++
}

// zeros encodes n zero bytes.
func (e *runEncoder) zeros(n int) {
	e.literal(0)
	e.repeat(n-1, dist1)
	e.s2 += uint64(n) * e.s1
	e.length += int64(n)
}

func (e *runEncoder) sum() uint32 {
	e.reduce()
	return uint32(e.s2<<16 | e.s1)
}

// compressLines is the zlib stream of the picture's filtered lines: of c,
// or with drawIn, of c's palette drawn a window of lines at a time.
func compressLines(c *canvas, drawIn func(win *canvas)) ([]byte, error) {
	px := make([]pixel, len(c.pal))
	for i, col := range c.pal {
		px[i] = pixelOf([3]byte{col.R, col.G, col.B})
	}
	// More stripes than CPUs, so that one CPU lent elsewhere meanwhile
	// holds up a small part.
	n := max(1, min(4*runtime.GOMAXPROCS(0), c.h/64))
	stripes := make([]runEncoder, n)
	// Windows' pixels, one a worker at a time, cleared for each stripe.
	bufs := make(chan []uint16, runtime.GOMAXPROCS(0))
	parallel(n, func(i int) {
		e := &stripes[i]
		e.s1 = 1
		e.out = make([]byte, 0, (c.h/n+1)*c.w/2+64<<10) // about what a picture of tables takes
		final := uint64(0)
		if i == n-1 {
			final = 1
		}
		e.put(final|1<<1, 3) // BFINAL, BTYPE 01: fixed codes
		lo, hi := c.h*i/n, c.h*(i+1)/n
		win := c
		if drawIn != nil {
			var buf []uint16
			select {
			case buf = <-bufs:
			default:
			}
			win = c.window(max(lo-1, 0), hi, buf) // and the line above, to compare with
			drawIn(win)
			defer func() { bufs <- win.pix[:cap(win.pix)] }()
		}
		for y := lo; y < hi; y++ {
			line := win.line(y)
			if y > 0 && bytes.Equal(asBytes(line), asBytes(win.line(y-1))) {
				e.filterByte(2) // Up: every byte is the one above
				e.zeros(3 * c.w)
				e.reduce()
				continue
			}
			e.filterByte(0)
			for x := 0; x < len(line); {
				k := runLen(line, x)
				e.pixels(&px[line[x]], k)
				x += k
			}
			e.reduce()
		}
		eob := fixedLit[256]
		e.put(uint64(eob.bits), uint(eob.n))
		if final == 0 {
			e.put(0, 3) // an empty stored block, not final: byte-aligned
			e.flush()
			e.out = append(e.out, 0, 0, 0xff, 0xff)
		} else {
			e.flush()
		}
	})
	size := 6
	for i := range stripes {
		size += len(stripes[i].out)
	}
	z := make([]byte, 0, size)
	z = append(z, 0x78, 0x01) // deflate, 32 KiB window, the fastest level
	var sum uint32 = 1        // the Adler-32 of nothing
	for i := range stripes {
		z = append(z, stripes[i].out...)
		sum = adler32Combine(sum, stripes[i].sum(), stripes[i].length)
	}
	return binary.BigEndian.AppendUint32(z, sum), nil
}

// asBytes is s's memory, for comparisons by the word.
func asBytes(s []uint16) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
}

// runLen is how many pixels from x on have line[x]'s colour, compared
// four at a time.
func runLen(line []uint16, x int) int {
	v := line[x]
	pat := uint64(v) * 0x0001_0001_0001_0001
	b := asBytes(line)
	k := 1
	for x+k+4 <= len(line) {
		if d := binary.LittleEndian.Uint64(b[2*(x+k):]) ^ pat; d != 0 {
			return k + bits.TrailingZeros64(d)/16
		}
		k += 4
	}
	for x+k < len(line) && line[x+k] == v {
		k++
	}
	return k
}
