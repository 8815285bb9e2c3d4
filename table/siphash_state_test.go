package table

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// The datapath finishes a 4-byte message's hash from FlowHashState as
// below (bpf/director.c, hash_flow); it must give FlowHash.
func TestFlowHashState(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10000; i++ {
		var key Key
		var m [4]byte
		binary.LittleEndian.PutUint64(key[:], rng.Uint64())
		binary.LittleEndian.PutUint64(key[8:], rng.Uint64())
		binary.LittleEndian.PutUint32(m[:], rng.Uint32())
		st := FlowHashState(key)
		w := uint64(binary.LittleEndian.Uint32(m[:])) | 4<<56
		s := sipState{st[0], st[1], st[2], st[3] ^ w}
		// The rest of the first round.
		s.v2 += s.v3
		s.v3 = bits.RotateLeft64(s.v3, 16) ^ s.v2
		s.v0 += s.v3
		s.v3 = bits.RotateLeft64(s.v3, 21) ^ s.v0
		s.v2 += s.v1
		s.v1 = bits.RotateLeft64(s.v1, 17) ^ s.v2
		s.v2 = bits.RotateLeft64(s.v2, 32)
		s.round()
		s.v0 ^= w
		if got, want := s.finalize(), FlowHash(key, m[:]); got != want {
			t.Fatalf("key %x message %x: %#x from the state, %#x from FlowHash", key, m, got, want)
		}
	}
}

// TestRowStates: the states rowStates makes in bulk (eight rows at a time
// in the vector unit, where there is one) are rowState's, for any start and
// length, at the ends of the row numbers too.
func TestRowStates(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(name string, vector bool) {
		for i := 0; i < 200; i++ {
			k0, k1 := rng.Uint64(), rng.Uint64()
			from := rng.Uint32()
			switch i % 4 {
			case 0:
				from = 0
			case 1:
				from = Rows - 24
			case 2:
				from = ^uint32(0) - 5 // row numbers wrap in the message, as uint32
			}
			out := make([]sipState, rng.IntN(40))
			rowStates(vector, k0, k1, from, out)
			for j, got := range out {
				if want := rowState(k0, k1, from+uint32(j)); got != want {
					t.Fatalf("%s: keys %#x %#x, row %d: %+v, want %+v", name, k0, k1, from+uint32(j), got, want)
				}
			}
		}
	}
	check("default", haveVectorScores)
	check("portable", false)
}
