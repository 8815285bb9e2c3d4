// Package cidcipher is QUIC-LB's connection ID encryption
// (draft-ietf-quic-load-balancers, "Server ID Encoding in Connection
// IDs"): what follows a connection ID's first octet, the server ID and
// the nonce, is encrypted with a 16-byte key shared by the servers and
// the load balancers. When server ID and nonce are 16 bytes together, they
// are one AES-128-ECB block, encrypted once; otherwise a four-round
// Feistel network whose round function is AES-128-ECB encrypts them in
// place, keeping their length. A load balancer needs only the server ID:
// ServerID stops after three rounds when the server ID lies in the left
// half.
//
// It has no QUIC or kernel code: servers (table/quiclb), the reference
// model and the tests share it.
package cidcipher

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
)

// The draft's bounds on server ID + nonce for the four-pass construction
// (its expand function carries the length in one octet).
const (
	MinLen = 5
	MaxLen = 19
	// SinglePass is the length that is one AES block.
	SinglePass = aes.BlockSize
)

// Cipher encrypts and decrypts the server ID and nonce of one QUIC-LB
// configuration. It is safe for concurrent use.
type Cipher struct {
	b             cipher.Block
	sidLen, nonce int
}

// New is the cipher of a configuration with this key, server ID length
// and nonce length.
func New(key [16]byte, sidLen, nonceLen int) (*Cipher, error) {
	n := sidLen + nonceLen
	if sidLen < 1 || nonceLen < 1 || n < MinLen || n > MaxLen {
		return nil, fmt.Errorf("server ID of %d and nonce of %d bytes: together from %d to %d", sidLen, nonceLen, MinLen, MaxLen)
	}
	b, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, err
	}
	return &Cipher{b: b, sidLen: sidLen, nonce: nonceLen}, nil
}

// Len is the length of what the cipher encrypts: server ID and nonce.
func (c *Cipher) Len() int { return c.sidLen + c.nonce }

// Encrypt encrypts plain (server ID then nonce, Len bytes) into dst (Len
// bytes; it may be plain).
func (c *Cipher) Encrypt(dst, plain []byte) {
	c.check(dst, plain)
	if c.Len() == SinglePass {
		c.b.Encrypt(dst, plain)
		return
	}
	f := c.feistel(plain)
	f.right = f.round(1, f.left, f.right, clearFirst)
	f.left = f.round(2, f.right, f.left, clearLast)
	f.right = f.round(3, f.left, f.right, clearFirst)
	f.left = f.round(4, f.right, f.left, clearLast)
	f.join(dst)
}

// Decrypt decrypts ct (Len bytes) into dst (Len bytes; it may be ct).
func (c *Cipher) Decrypt(dst, ct []byte) {
	c.check(dst, ct)
	if c.Len() == SinglePass {
		c.b.Decrypt(dst, ct)
		return
	}
	f := c.feistel(ct)
	f.undo(true)
	f.join(dst)
}

// ServerID decrypts the server ID of ct (Len bytes) into dst (the server
// ID's length), in three rounds when the server ID is in the left half.
func (c *Cipher) ServerID(dst, ct []byte) {
	if len(dst) != c.sidLen || len(ct) != c.Len() {
		panic(fmt.Sprintf("cidcipher: %d and %d bytes, want %d and %d", len(dst), len(ct), c.sidLen, c.Len()))
	}
	if c.Len() == SinglePass {
		var b [SinglePass]byte
		c.b.Decrypt(b[:], ct)
		copy(dst, b[:c.sidLen])
		return
	}
	f := c.feistel(ct)
	if f.undo(c.sidLen > c.Len()/2) {
		var all [MaxLen]byte
		f.join(all[:c.Len()])
		copy(dst, all[:c.sidLen])
		return
	}
	copy(dst, f.left[:c.sidLen])
}

func (c *Cipher) check(dst, src []byte) {
	if len(dst) != c.Len() || len(src) != c.Len() {
		panic(fmt.Sprintf("cidcipher: %d and %d bytes, want %d", len(dst), len(src), c.Len()))
	}
}

// feistel is the network's state: two halves of half bytes each; with an
// odd length, the middle octet's high nibble is the left's last and its
// low nibble the right's first, the other nibble of each zero.
type feistel struct {
	c           *Cipher
	n, half     int
	left, right []byte
}

type clear int

const (
	clearFirst clear = iota // the right half's first high nibble
	clearLast               // the left half's last low nibble
)

func (c *Cipher) feistel(in []byte) *feistel {
	n := c.Len()
	half := (n + 1) / 2
	f := &feistel{c: c, n: n, half: half, left: make([]byte, half), right: make([]byte, half)}
	copy(f.left, in[:half])
	copy(f.right, in[n-half:])
	f.mask(f.left, clearLast)
	f.mask(f.right, clearFirst)
	return f
}

func (f *feistel) mask(h []byte, which clear) {
	if f.n%2 == 0 {
		return
	}
	if which == clearLast {
		h[f.half-1] &= 0xf0
	} else {
		h[0] &= 0x0f
	}
}

// round is one pass: other XOR the first half bytes of
// AES(expand(n, pass, in)), masked as its half is.
func (f *feistel) round(pass byte, in, other []byte, which clear) []byte {
	var block [aes.BlockSize]byte
	copy(block[:], in)
	block[14], block[15] = byte(f.n), pass
	f.c.b.Encrypt(block[:], block[:])
	out := make([]byte, f.half)
	for i := range out {
		out[i] = other[i] ^ block[i]
	}
	f.mask(out, which)
	return out
}

// undo runs the rounds backwards down to left_0, and to right_0 as well
// when all is set (or the server ID reaches into the right half).
func (f *feistel) undo(all bool) bool {
	f.left = f.round(4, f.right, f.left, clearLast)
	f.right = f.round(3, f.left, f.right, clearFirst)
	f.left = f.round(2, f.right, f.left, clearLast)
	if all {
		f.right = f.round(1, f.left, f.right, clearFirst)
	}
	return all
}

// join writes the halves as n bytes, the middle octet's nibbles merged.
func (f *feistel) join(dst []byte) {
	copy(dst, f.left)
	if f.n%2 == 1 {
		dst[f.half-1] = f.left[f.half-1] | f.right[0]
		copy(dst[f.half:], f.right[1:])
		return
	}
	copy(dst[f.half:], f.right)
}
