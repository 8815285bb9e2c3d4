package loader

import (
	"encoding/binary"
	"net/netip"

	"github.com/director/director/bpf"
	"github.com/director/director/table"
)

// Geometry of the exact-match table (enum dir_limit in director.h).
const (
	exactSlots  = uint32(bpf.DirectorDirLimitDIR_EXACT_SLOTS)
	exactProbes = uint32(bpf.DirectorDirLimitDIR_EXACT_PROBES)
)

func exactKey(proto table.Proto, addr netip.Addr, port uint16) bpf.DirectorDirExactKey {
	k := bpf.DirectorDirExactKey{Proto: uint8(proto), Port: port<<8 | port>>8}
	k.Family, k.Addr = putAddr(addr)
	return k
}

// exactMul are DIR_EXACT_K(0)..K(4) from director.h, whose halves
// bpf2go gives (enum dir_exact_mult).
var exactMul = [5]uint64{
	uint64(bpf.DirectorDirExactMultDIR_EXACT_K0HI)<<32 | uint64(bpf.DirectorDirExactMultDIR_EXACT_K0LO),
	uint64(bpf.DirectorDirExactMultDIR_EXACT_K1HI)<<32 | uint64(bpf.DirectorDirExactMultDIR_EXACT_K1LO),
	uint64(bpf.DirectorDirExactMultDIR_EXACT_K2HI)<<32 | uint64(bpf.DirectorDirExactMultDIR_EXACT_K2LO),
	uint64(bpf.DirectorDirExactMultDIR_EXACT_K3HI)<<32 | uint64(bpf.DirectorDirExactMultDIR_EXACT_K3LO),
	uint64(bpf.DirectorDirExactMultDIR_EXACT_K4HI)<<32 | uint64(bpf.DirectorDirExactMultDIR_EXACT_K4LO),
}

// exactHash is the C exact_hash: the key's five 32-bit words, read in host
// (little-endian) order, each times its constant, summed in 64 bits, the
// halves folded.
func exactHash(k bpf.DirectorDirExactKey) uint32 {
	var b [20]byte
	b[0], b[1] = k.Proto, k.Family
	binary.LittleEndian.PutUint16(b[2:], k.Port)
	copy(b[4:], k.Addr[:])
	var h uint64
	for i := 0; i < 5; i++ {
		h += uint64(binary.LittleEndian.Uint32(b[4*i:])) * exactMul[i]
	}
	return uint32(h>>32) ^ uint32(h)
}

// buildExact places the exact entries in an open-addressing table. An
// entry with no free slot within exactProbes of its home is left out: the
// trie, which holds every bind, answers for it. It returns how many were
// placed.
func buildExact(entries []table.BindEntry, tables []*table.Table, slots []int) (*bpf.DirectorDirExactTable, int) {
	t := new(bpf.DirectorDirExactTable)
	placed := 0
	for _, e := range entries {
		if !e.Exact {
			continue
		}
		k := exactKey(e.Proto, e.Prefix.Addr(), e.Port)
		h := exactHash(k)
		for i := uint32(0); i < exactProbes; i++ {
			s := &t.E[(h+i)&(exactSlots-1)]
			if s.SlotPlus1 == 0 {
				*s = bpf.DirectorDirExactEntry{Key: k, SlotPlus1: uint32(slots[e.Table]) + 1, HashState: table.FlowHashState(tables[e.Table].HashKey)}
				placed++
				break
			}
		}
	}
	return t, placed
}
