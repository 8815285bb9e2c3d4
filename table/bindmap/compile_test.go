package bindmap

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/director/director/table"
)

// lpm simulates the datapath's two-stage lookup over compiled entries.
func lpm(entries []Entry, dst netip.Addr, proto table.Proto, port uint16) (int, bool) {
	for _, e := range entries {
		if e.Exact && e.Proto == proto && e.Prefix.Addr() == dst && e.Port == port {
			return e.Table, true
		}
	}
	group, bits := -1, -1
	for _, e := range entries {
		if !e.IsPort && !e.Exact && e.Proto == proto && e.Prefix.Addr().Is4() == dst.Is4() && e.Prefix.Contains(dst) && e.Prefix.Bits() > bits {
			group, bits = e.Group, e.Prefix.Bits()
		}
	}
	if group < 0 {
		return 0, false
	}
	table, pbits := -1, -1
	for _, e := range entries {
		if e.IsPort && e.Group == group && e.PortBits > pbits && (port>>(16-e.PortBits)) == (e.Port>>(16-e.PortBits)) {
			table, pbits = e.Table, e.PortBits
		}
	}
	if table < 0 {
		return 0, false
	}
	return table, true
}

func TestPortBlocks(t *testing.T) {
	for _, c := range []struct {
		lo, hi uint16
		n      int
	}{{80, 80, 1}, {0, 65535, 1}, {1000, 2000, 8}, {1, 65534, 30}, {65535, 65535, 1}} {
		blocks := portBlocks(c.lo, c.hi)
		if len(blocks) != c.n {
			t.Errorf("[%d,%d]: %d blocks, want %d", c.lo, c.hi, len(blocks), c.n)
		}
		covered := 0
		for _, b := range blocks {
			covered += 1 << (16 - b.bits)
		}
		if covered != int(c.hi)-int(c.lo)+1 {
			t.Errorf("[%d,%d]: blocks cover %d ports", c.lo, c.hi, covered)
		}
	}
}

func TestCompiledBindsMatchDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for iter := 0; iter < 200; iter++ {
		var refs []table.BindRef
		used := map[string]bool{}
		for len(refs) < 1+rng.IntN(12) {
			bits := []int{32, 32, 24, 16, 28, 0}[rng.IntN(6)]
			single := rng.IntN(2) == 0
			addr := netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(2)), byte(rng.IntN(4))})
			if rng.IntN(4) == 0 {
				addr = netip.AddrFrom16([16]byte{0xfd, 0, 15: byte(rng.IntN(4))})
				bits = []int{128, 120, 64}[rng.IntN(3)]
			}
			p := netip.PrefixFrom(addr, bits).Masked()
			lo := uint16(rng.IntN(100))
			hi := lo + uint16(rng.IntN(50))
			if single {
				hi = lo
			}
			proto := []table.Proto{table.ProtoTCP, table.ProtoUDP}[rng.IntN(2)]
			b := table.Bind{Prefix: p, Proto: proto, PortStart: lo, PortEnd: hi}
			// keep the config invariant: no overlap at one prefix
			k := p.String() + proto.String()
			if used[k] {
				continue
			}
			used[k] = true
			refs = append(refs, table.BindRef{Table: rng.IntN(4), Bind: b})
		}
		entries := Compile(refs)
		for q := 0; q < 300; q++ {
			dst := netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(2)), byte(rng.IntN(4))})
			if rng.IntN(4) == 0 {
				dst = netip.AddrFrom16([16]byte{0xfd, 0, 15: byte(rng.IntN(4))})
			}
			proto := []table.Proto{table.ProtoTCP, table.ProtoUDP}[rng.IntN(2)]
			port := uint16(rng.IntN(160))
			wt, wok := table.ResolveBind(refs, dst, proto, port, false)
			gt, gok := lpm(entries, dst, proto, port)
			if wt != gt || wok != gok {
				t.Fatalf("binds %v: %s %s:%d: compiled %d/%v, definition %d/%v", refs, proto, dst, port, gt, gok, wt, wok)
			}
			echo := table.ProtoICMP
			if dst.Is6() {
				echo = table.ProtoICMPv6
			}
			wt, wok = table.ResolveBind(refs, dst, 0, 0, true)
			gt, gok = lpm(entries, dst, echo, 0)
			if wt != gt || wok != gok {
				t.Fatalf("binds %v: echo to %s: compiled %d/%v, definition %d/%v", refs, dst, gt, gok, wt, wok)
			}
		}
	}
}
