package classify

import (
	"encoding/binary"
	"unsafe"

	"github.com/director/director/internal/datapath/chunk"
)

// flowTable is the Classifier's memo of each flow's fate. Its index is a
// flat array of 8-byte slots (a hash tag and a flow id), and the flows
// themselves are kept densely in the order they were first seen. Captures
// are in time order, so the flows active at any moment were mostly first
// seen close together and share cache lines and pages; the index is small
// enough to stay in cache. A replay of a large capture is bound by cache
// misses, and a Go map spreads its entries over all of its memory.
type flowTable struct {
	index []uint64 // tag<<32 | id (1 + position in recs); 0 is empty. A power of two, at most half full.
	recs  chunk.List[flowRec]
}

type flowRec struct {
	key  flowKey
	fate fate
}

const minFlowSlots = 1 << 12

func (k *flowKey) hash() uint64 {
	b := (*[unsafe.Sizeof(flowKey{})]byte)(unsafe.Pointer(k))
	h := uint64(0x243f6a8885a308d3)
	for i := 0; i+8 <= len(b); i += 8 {
		h = (h ^ binary.LittleEndian.Uint64(b[i:])) * 0x9e3779b97f4a7c15
		h ^= h >> 29
	}
	return h
}

// findHashed returns k's flow, or nil and the index slot it would take;
// h is k.hash().
func (t *flowTable) findHashed(k *flowKey, h uint64) (*flowRec, int32, int) {
	if t.index == nil {
		t.index = make([]uint64, minFlowSlots)
	}
	tag := h >> 32
	mask := uint64(len(t.index) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		e := t.index[i]
		if e == 0 {
			return nil, 0, int(i)
		}
		if e>>32 == tag {
			id := int32(uint32(e))
			if r := t.recs.At(int(id - 1)); r.key == *k {
				return r, id, int(i)
			}
		}
	}
}

// insert adds k at the slot find returned, and returns the flow's id.
func (t *flowTable) insert(slot int, k *flowKey, f fate) int32 {
	id := int32(t.recs.Append(flowRec{key: *k, fate: f}) + 1)
	t.index[slot] = k.hash()>>32<<32 | uint64(uint32(id))
	if t.recs.Len()*2 > len(t.index) {
		t.index = make([]uint64, 2*len(t.index))
		mask := uint64(len(t.index) - 1)
		for i := 0; i < t.recs.Len(); i++ {
			h := t.recs.At(i).key.hash()
			j := h & mask
			for t.index[j] != 0 {
				j = (j + 1) & mask
			}
			t.index[j] = h>>32<<32 | uint64(uint32(i+1))
		}
	}
	return id
}
