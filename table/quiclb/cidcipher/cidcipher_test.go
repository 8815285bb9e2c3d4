package cidcipher

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func key(t *testing.T, s string) (k [16]byte) {
	copy(k[:], unhex(t, s))
	return k
}

// TestDraftVectors: the draft's test vectors ("Encrypted CIDs", and the
// four-pass "Encryption Example"), each a connection ID whose first octet
// is the config rotation and length and whose rest is the server ID and
// nonce encrypted.
func TestDraftVectors(t *testing.T) {
	const k = "8f95f09245765f80256934e50c66207f"
	for _, v := range []struct {
		key, sid, nonce, cid string
		passes               string
	}{
		{k, "ed793a", "ee080dbf", "0720b1d07b359d3c", "four, odd length"},
		{k, "ed793a51d49b8f5fab65", "ee080dbf48", "2fcc381bc74cb4fbad2823a3d1f8fed2", "four, the server ID longer than the nonce"},
		{k, "ed793a51d49b8f5f", "ee080dbf48c0d1e5", "504dd2d05a7b0de9b2b9907afb5ecf8cc3", "single"},
		{k, "ed793a51d49b8f5fab", "ee080dbf48c0d1e55d", "125779c9cc86beb3a3a4a3ca96fce4bfe0cdbc", "four, even length"},
		{"fdf726a9893ec05c0632d3956680baf0", "31441a", "9c69c275", "0767947d29be054a", "the example"},
	} {
		sid, nonce, cid := unhex(t, v.sid), unhex(t, v.nonce), unhex(t, v.cid)
		c, err := New(key(t, v.key), len(sid), len(nonce))
		if err != nil {
			t.Fatal(err)
		}
		if cid[0]&0x1f != byte(len(cid)-1) {
			t.Fatalf("%s: the vector's first octet %#x does not give its length %d", v.passes, cid[0], len(cid))
		}
		got := make([]byte, c.Len())
		c.Encrypt(got, append(append([]byte(nil), sid...), nonce...))
		if !bytes.Equal(got, cid[1:]) {
			t.Errorf("%s: encrypted %x, want %x", v.passes, got, cid[1:])
		}
		plain := make([]byte, c.Len())
		c.Decrypt(plain, cid[1:])
		if !bytes.Equal(plain, append(append([]byte(nil), sid...), nonce...)) {
			t.Errorf("%s: decrypted %x, want %x%x", v.passes, plain, sid, nonce)
		}
		id := make([]byte, len(sid))
		c.ServerID(id, cid[1:])
		if !bytes.Equal(id, sid) {
			t.Errorf("%s: server ID %x, want %x", v.passes, id, sid)
		}
	}
}

// TestRoundTrip: every length the draft allows, random keys and inputs:
// Decrypt undoes Encrypt, ServerID reads the server ID, and encryption
// changes the bytes.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := MinLen; n <= MaxLen; n++ {
		for sid := 1; sid < n; sid++ {
			var k [16]byte
			for i := range k {
				k[i] = byte(r.Uint32())
			}
			c, err := New(k, sid, n-sid)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				p := make([]byte, n)
				for i := range p {
					p[i] = byte(r.Uint32())
				}
				ct := make([]byte, n)
				c.Encrypt(ct, p)
				back := make([]byte, n)
				c.Decrypt(back, ct)
				id := make([]byte, sid)
				c.ServerID(id, ct)
				if !bytes.Equal(back, p) || !bytes.Equal(id, p[:sid]) || bytes.Equal(ct, p) {
					t.Fatalf("n %d sid %d: %x -> %x -> %x, server ID %x", n, sid, p, ct, back, id)
				}
			}
		}
	}
	if _, err := New([16]byte{}, 2, 2); err == nil {
		t.Error("4 bytes in all accepted")
	}
	if _, err := New([16]byte{}, 10, 10); err == nil {
		t.Error("20 bytes in all accepted")
	}
}

// TestSchedule: FIPS 197's key expansion example (Appendix A.1), words
// read as the program reads them (first byte low); and the inverse
// schedule's ends are the encryption schedule's, swapped.
func TestSchedule(t *testing.T) {
	rk := Schedule(key(t, "2b7e151628aed2a6abf7158809cf4f3c"))
	for i, want := range map[int]uint32{4: 0x17fefaa0, 5: 0xb12c5488, 43: 0xa60c63b6, 40: 0xa8f914d0} {
		if rk.Enc[i] != want {
			t.Errorf("w[%d] = %#08x, want %#08x", i, rk.Enc[i], want)
		}
	}
	for c := 0; c < 4; c++ {
		if rk.Dec[c] != rk.Enc[40+c] || rk.Dec[40+c] != rk.Enc[c] {
			t.Errorf("column %d: the inverse schedule's ends are not the schedule's", c)
		}
	}
}
