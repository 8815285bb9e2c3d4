package table

import (
	"encoding/binary"
	"math/bits"
)

// A specialised SipHash-2-4 for the table build. Every score of a row hashes
// the same first 8-byte block (the row seed), so the state after that block
// is computed once per row and shared by all of the row's backends. Tests
// check it against github.com/dchest/siphash on every input shape it sees.

type sipState struct{ v0, v1, v2, v3 uint64 }

func newSip(k0, k1 uint64) sipState {
	return sipState{
		k0 ^ 0x736f6d6570736575,
		k1 ^ 0x646f72616e646f6d,
		k0 ^ 0x6c7967656e657261,
		k1 ^ 0x7465646279746573,
	}
}

func (s *sipState) round() {
	s.v0 += s.v1
	s.v1 = bits.RotateLeft64(s.v1, 13)
	s.v1 ^= s.v0
	s.v0 = bits.RotateLeft64(s.v0, 32)
	s.v2 += s.v3
	s.v3 = bits.RotateLeft64(s.v3, 16)
	s.v3 ^= s.v2
	s.v0 += s.v3
	s.v3 = bits.RotateLeft64(s.v3, 21)
	s.v3 ^= s.v0
	s.v2 += s.v1
	s.v1 = bits.RotateLeft64(s.v1, 17)
	s.v1 ^= s.v2
	s.v2 = bits.RotateLeft64(s.v2, 32)
}

// FlowHashState is SipHash-2-4's state for key after initialization and
// the half of the first round that involves no message: v0 and v1 after
// "v0 += v1; v1 = rotl(v1, 13) ^ v0; v0 = rotl(v0, 32)", v2 and v3 as
// initialized. The datapath keeps it with each exact bind, so that a
// packet's flow hash need not wait for the key.
func FlowHashState(key Key) [4]uint64 {
	s := newSip(keyWords(key))
	s.v0 += s.v1
	s.v1 = bits.RotateLeft64(s.v1, 13) ^ s.v0
	s.v0 = bits.RotateLeft64(s.v0, 32)
	return [4]uint64{s.v0, s.v1, s.v2, s.v3}
}

// compress absorbs one little-endian 8-byte message word.
func (s *sipState) compress(m uint64) {
	s.v3 ^= m
	s.round()
	s.round()
	s.v0 ^= m
}

func (s *sipState) finalize() uint64 {
	s.v2 ^= 0xff
	s.round()
	s.round()
	s.round()
	s.round()
	return s.v0 ^ s.v1 ^ s.v2 ^ s.v3
}

// keyWords splits a 16-byte SipHash key the way the reference does.
func keyWords(k Key) (uint64, uint64) {
	return binary.LittleEndian.Uint64(k[:8]), binary.LittleEndian.Uint64(k[8:])
}

// rowSeed is SipHash-2-4 over the 4-byte big-endian row number, as a
// little-endian word (its 8 output bytes, which start every score message).
func rowSeed(k0, k1 uint64, row uint32) uint64 {
	s := newSip(k0, k1)
	s.compress(4<<56 | uint64(bits.ReverseBytes32(row)))
	return s.finalize()
}

// rowState is the SipHash state after absorbing the row seed: the shared
// prefix of every score in that row.
func rowState(k0, k1 uint64, row uint32) sipState {
	s := newSip(k0, k1)
	s.compress(rowSeed(k0, k1, row))
	return s
}

// addrWords are a backend address's message words after the row seed,
// including SipHash's final length block.
type addrWords struct {
	v6     bool
	w1, w2 uint64 // IPv4: w1 is the final block. IPv6: the two address halves.
}

func wordsFor(b []byte) addrWords {
	if len(b) == 4 {
		return addrWords{w1: 12<<56 | uint64(binary.LittleEndian.Uint32(b))}
	}
	return addrWords{v6: true, w1: binary.LittleEndian.Uint64(b[:8]), w2: binary.LittleEndian.Uint64(b[8:])}
}

// score is GLB's rendezvous score: SipHash(seed, rowseed ‖ addr) read as a
// big-endian integer.
func (w *addrWords) score(s sipState) uint64 {
	v0, v1, v2, v3 := s.v0, s.v1, s.v2, s.v3
	if w.v6 {
		v3 ^= w.w1
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= w.w1
		v3 ^= w.w2
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= w.w2
		const last = 24 << 56
		v3 ^= last
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= last
	} else {
		v3 ^= w.w1
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= w.w1
	}
	v2 ^= 0xff
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	return bits.ReverseBytes64(v0 ^ v1 ^ v2 ^ v3)
}

// score2v4 scores two IPv4 backends at once. Interleaving two independent
// hashes lets the CPU overlap their rounds, which are each a long
// dependency chain.
func score2v4(s sipState, wa, wb uint64) (uint64, uint64) {
	a0, a1, a2, a3 := s.v0, s.v1, s.v2, s.v3^wa
	b0, b1, b2, b3 := s.v0, s.v1, s.v2, s.v3^wb
	a0, a1, a2, a3 = sipRound(a0, a1, a2, a3)
	b0, b1, b2, b3 = sipRound(b0, b1, b2, b3)
	a0, a1, a2, a3 = sipRound(a0, a1, a2, a3)
	b0, b1, b2, b3 = sipRound(b0, b1, b2, b3)
	a0 ^= wa
	b0 ^= wb
	a2 ^= 0xff
	b2 ^= 0xff
	a0, a1, a2, a3 = sipRound(a0, a1, a2, a3)
	b0, b1, b2, b3 = sipRound(b0, b1, b2, b3)
	a0, a1, a2, a3 = sipRound(a0, a1, a2, a3)
	b0, b1, b2, b3 = sipRound(b0, b1, b2, b3)
	a0, a1, a2, a3 = sipRound(a0, a1, a2, a3)
	b0, b1, b2, b3 = sipRound(b0, b1, b2, b3)
	a0, a1, a2, a3 = sipRound(a0, a1, a2, a3)
	b0, b1, b2, b3 = sipRound(b0, b1, b2, b3)
	return bits.ReverseBytes64(a0 ^ a1 ^ a2 ^ a3), bits.ReverseBytes64(b0 ^ b1 ^ b2 ^ b3)
}

// sipRound works on values rather than through a pointer so the
// compiler inlines them and keeps the state in registers: this loop is the
// whole cost of a table build.
func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13) ^ v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16) ^ v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21) ^ v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17) ^ v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}

// FlowHash is GLB's flow hash: SipHash-2-4 keyed with the table's hash_key
// over the given bytes (by default the client address), as a little-endian
// integer. The row is FlowHash & 0xffff.
func FlowHash(key Key, data []byte) uint64 {
	k0, k1 := keyWords(key)
	st := newSip(k0, k1)
	v0, v1, v2, v3 := st.v0, st.v1, st.v2, st.v3
	n := len(data)
	for len(data) >= 8 {
		m := binary.LittleEndian.Uint64(data)
		v3 ^= m
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= m
		data = data[8:]
	}
	var last [8]byte
	copy(last[:], data)
	last[7] = byte(n)
	m := binary.LittleEndian.Uint64(last[:])
	v3 ^= m
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= m
	v2 ^= 0xff
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	return v0 ^ v1 ^ v2 ^ v3
}
