package cidcipher

// RoundKeys are a key's AES-128 schedules as the XDP program takes them
// (bpf/aes.h): Enc for encryption, Dec for the equivalent inverse cipher
// (FIPS 197, 5.3.5), each word a column whose first row is its low byte.
// They are as secret as the key.
type RoundKeys struct {
	Enc, Dec [44]uint32
}

// Schedule expands key.
func Schedule(key [16]byte) RoundKeys {
	var rk RoundKeys
	w := &rk.Enc
	for i := 0; i < 4; i++ {
		w[i] = uint32(key[4*i]) | uint32(key[4*i+1])<<8 | uint32(key[4*i+2])<<16 | uint32(key[4*i+3])<<24
	}
	rcon := byte(1)
	for i := 4; i < 44; i++ {
		t := w[i-1]
		if i%4 == 0 {
			t = subWord(t>>8|t<<24) ^ uint32(rcon) // RotWord, SubWord, Rcon
			rcon = xtime(rcon)
		}
		w[i] = w[i-4] ^ t
	}
	for r := 0; r <= 10; r++ {
		for c := 0; c < 4; c++ {
			k := w[4*(10-r)+c]
			if r > 0 && r < 10 {
				k = invMixColumn(k)
			}
			rk.Dec[4*r+c] = k
		}
	}
	return rk
}

var sbox = sboxTable()

func subWord(x uint32) uint32 {
	return uint32(sbox[x&0xff]) | uint32(sbox[x>>8&0xff])<<8 | uint32(sbox[x>>16&0xff])<<16 | uint32(sbox[x>>24])<<24
}

func xtime(b byte) byte {
	if b&0x80 != 0 {
		return b<<1 ^ 0x1b
	}
	return b << 1
}

func gmul(a, b byte) byte {
	var p byte
	for ; b != 0; b >>= 1 {
		if b&1 != 0 {
			p ^= a
		}
		a = xtime(a)
	}
	return p
}

// invMixColumn is InvMixColumns of one column.
func invMixColumn(x uint32) uint32 {
	a := [4]byte{byte(x), byte(x >> 8), byte(x >> 16), byte(x >> 24)}
	var o [4]byte
	for r := 0; r < 4; r++ {
		o[r] = gmul(a[r], 14) ^ gmul(a[(r+1)%4], 11) ^ gmul(a[(r+2)%4], 13) ^ gmul(a[(r+3)%4], 9)
	}
	return uint32(o[0]) | uint32(o[1])<<8 | uint32(o[2])<<16 | uint32(o[3])<<24
}

// sboxTable is the S-box, from its definition (FIPS 197, 5.1.1).
func sboxTable() (s [256]byte) {
	for x := 0; x < 256; x++ {
		var inv byte
		for y := 1; y < 256 && x != 0; y++ {
			if gmul(byte(x), byte(y)) == 1 {
				inv = byte(y)
				break
			}
		}
		rot := func(b byte, n uint) byte { return b<<n | b>>(8-n) }
		s[x] = inv ^ rot(inv, 1) ^ rot(inv, 2) ^ rot(inv, 3) ^ rot(inv, 4) ^ 0x63
	}
	return s
}
