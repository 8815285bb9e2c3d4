package picture

import (
	"hash/fnv"
	"image/color"
	"math"
	"net/netip"
	"slices"
)

// Slots is how many colours a palette has: 64 hues at 4 lightnesses.
const Slots = 256

// Marks are the colours no backend gets: red is kept for rows at risk,
// so that they stand out from every backend's colour; a ring (a heat
// map's busiest rows) is white inside ink, seen on any cell around it,
// and leaves the row's own colour showing.
var (
	AtRisk = color.RGBA{0xff, 0x00, 0x00, 0xff}
	Ring   = color.RGBA{0xff, 0xff, 0xff, 0xff}
	// Empty is a row with no backend to show (an absent table's side).
	Empty = color.RGBA{0x30, 0x30, 0x30, 0xff}
)

// SlotColor is slot s's colour (s mod Slots): hue from 40° to 320°, away
// from red, in 64 steps; luminance in 4 levels, each step of 64 slots a
// level, so that neighbouring slots differ in hue and the four colours
// of one hue differ in lightness. Every level is dark enough that a slot
// colour stands out 3:1 (WCAG's contrast for graphics) from any Dim
// colour: a row a change moves is seen among the rows that stay.
func SlotColor(s int) color.RGBA { return slotColors[((s%Slots)+Slots)%Slots] }

// slotLuminance are the levels' relative luminances (WCAG), the darkest
// to the lightest spread so that one hue's four are told apart; the
// lightest is what Dim's contrast allows.
var slotLuminance = [4]float64{0.10, 0.155, 0.06, 0.20}

var slotColors = func() (out [Slots]color.RGBA) {
	for s := range out {
		hue := 40 + float64(s%64)*280/64
		want := slotLuminance[s/64]
		lo, hi := 0.0, 1.0 // the lightness giving that luminance
		for range 40 {
			mid := (lo + hi) / 2
			if luminance(hsl(hue, 0.80, mid)) < want {
				lo = mid
			} else {
				hi = mid
			}
		}
		out[s] = hsl(hue, 0.80, lo)
	}
	return out
}()

// luminance is c's relative luminance, as WCAG defines it.
func luminance(c color.RGBA) float64 {
	lin := func(v uint8) float64 {
		f := float64(v) / 255
		if f <= 0.04045 {
			return f / 12.92
		}
		return math.Pow((f+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(c.R) + 0.7152*lin(c.G) + 0.0722*lin(c.B)
}

// Contrast is the WCAG contrast ratio of a and b, 1 to 21.
func Contrast(a, b color.RGBA) float64 {
	x, y := luminance(a), luminance(b)
	return (max(x, y) + 0.05) / (min(x, y) + 0.05)
}

// A Palette gives each backend address a colour: its preferred slot is a
// hash of the address, so that an address keeps its colour from picture
// to picture; where two of the palette's addresses want one slot, or
// colours too alike for a small palette, the lower address keeps it and
// the other moves on, so that up to Slots addresses all differ.
type Palette struct {
	slot map[netip.Addr]int
}

// NewPalette is the palette for addrs (duplicates are one).
func NewPalette(addrs []netip.Addr) *Palette {
	sorted := slices.Clone(addrs)
	slices.SortFunc(sorted, func(a, b netip.Addr) int { return a.Compare(b) })
	sorted = slices.Compact(sorted)
	p := &Palette{slot: map[netip.Addr]int{}}
	var used [Slots]bool
	free := Slots
	var taken []int
	for _, a := range sorted {
		s := preferred(a)
		if free > 0 {
			s = place(s, &used, taken)
			used[s] = true
			taken = append(taken, s)
			free--
		}
		p.slot[a] = s
	}
	return p
}

// spread is how many addresses a palette keeps apart beyond distinct
// slots: up to it, a slot whose colour is near a taken one is passed
// over too.
const spread = 48

// place is the slot an address whose preferred slot is s gets: s, or the
// next free one in steps of 37 slots (about half the hues round), and
// while the palette is small, the first of those not near a taken colour.
func place(s int, used *[Slots]bool, taken []int) int {
	first := -1
	for k := 0; k < Slots; k++ {
		c := (s + 37*k) % Slots
		if used[c] {
			continue
		}
		if first < 0 {
			first = c
		}
		if len(taken) >= spread || !nearAny(c, taken) {
			return c
		}
	}
	return first
}

// nearAny says whether slot s's colour is hard to tell from a taken one's:
// the same lightness and within 7 hue steps (about 30°), or the next
// lightness and within 2.
func nearAny(s int, taken []int) bool {
	for _, t := range taken {
		dh := (s%64 - t%64 + 64) % 64
		dh = min(dh, 64-dh)
		dl := s/64 - t/64
		if dl < 0 {
			dl = -dl
		}
		if dl == 0 && dh <= 7 || dl == 1 && dh <= 2 {
			return true
		}
	}
	return false
}

// Color is a's colour; an address not in the palette gets its preferred
// slot's.
func (p *Palette) Color(a netip.Addr) color.RGBA {
	if s, ok := p.slot[a]; ok {
		return SlotColor(s)
	}
	return SlotColor(preferred(a))
}

func preferred(a netip.Addr) int {
	h := fnv.New32a()
	b := a.Unmap().AsSlice()
	h.Write(b)
	return int(h.Sum32() % Slots)
}

// Dim is c faded seven eighths of the way to white, a tint of its hue: an
// unchanged row beside the ones a change moves, light enough that every
// slot colour and AtRisk stand out from it 3:1.
func Dim(c color.RGBA) color.RGBA {
	f := func(v uint8) uint8 { return uint8((int(v) + 7*0xff) / 8) }
	return color.RGBA{f(c.R), f(c.G), f(c.B), 0xff}
}

// HeatLevels is how many steps the heat ramp has, above black.
const HeatLevels = 32

// HeatIndex is the ramp step of a row with n packets where the busiest
// has max: 0 (black) for none, else 1 to HeatLevels on a logarithmic
// scale.
func HeatIndex(n, max uint64) int {
	if n == 0 || max == 0 {
		return 0
	}
	f := math.Log1p(float64(n)) / math.Log1p(float64(max))
	return 1 + int(math.Round(f*(HeatLevels-1)))
}

// Heat is the colour of a row with n packets where the busiest has max:
// dark blue to yellow, black for none.
func Heat(n, max uint64) color.RGBA { return heatLevel(HeatIndex(n, max)) }

func heatLevel(l int) color.RGBA {
	if l == 0 {
		return color.RGBA{0, 0, 0, 0xff}
	}
	f := float64(l-1) / (HeatLevels - 1)
	return hsl(240-f*180, 0.9, 0.25+0.4*f)
}

// hsl converts hue (degrees), saturation and lightness (0 to 1) to RGB.
func hsl(h, s, l float64) color.RGBA {
	c := (1 - math.Abs(2*l-1)) * s
	hp := math.Mod(h, 360) / 60
	x := c * (1 - math.Abs(math.Mod(hp, 2)-1))
	var r, g, b float64
	switch {
	case hp < 1:
		r, g = c, x
	case hp < 2:
		r, g = x, c
	case hp < 3:
		g, b = c, x
	case hp < 4:
		g, b = x, c
	case hp < 5:
		r, b = x, c
	default:
		r, b = c, x
	}
	m := l - c/2
	u := func(v float64) uint8 { return uint8(math.Round(255 * (v + m))) }
	return color.RGBA{u(r), u(g), u(b), 0xff}
}
