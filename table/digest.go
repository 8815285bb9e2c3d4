package table

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// Digest is a table's input digest (InputDigest); zero is none.
type Digest [32]byte

// InputDigest is the digest of what decides the table tc builds into,
// bound to fp, the fingerprint of what it built: HMAC-SHA-256 keyed by
// tc's seed over a versioned encoding of its name, hash key, binds and
// backends (address, state, health, weight and domain, in order), then
// fp. Health checks and the ramp interval decide no row and are left out.
//
// Two tables with the same digest were built from the same inputs into
// the rows fp names, so one may stand for the other without a build. The
// seed keys it: the digest reveals neither key nor seed (HMAC's output),
// and one who holds the kernel's maps but not the config (the kernel
// never holds the seed) cannot make the digest that would pass other
// rows off as these inputs'.
func InputDigest(tc *TableConfig, fp string) Digest {
	m := hmac.New(sha256.New, tc.Seed[:])
	var buf []byte
	str := func(s string) {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	str("director table inputs v1")
	str(tc.Name)
	buf = append(buf, tc.HashKey[:]...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(tc.Binds)))
	for _, b := range tc.Binds {
		str(b.String())
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(tc.Backends)))
	for _, b := range tc.Backends {
		a := b.IP.As16()
		buf = append(buf, a[:]...)
		buf = append(buf, byte(b.State), boolByte(b.Healthy), byte(b.W()>>8), byte(b.W()))
		str(b.Domain)
	}
	if tc.Balance != 0 {
		// Only when set, so that digests of tables without it stay as
		// they were.
		str("balance")
		buf = binary.BigEndian.AppendUint16(buf, tc.Balance)
	}
	str(fp)
	m.Write(buf)
	var d Digest
	copy(d[:], m.Sum(nil))
	return d
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// BuiltFrom reports whether t is the table tc builds into, by t's digest
// (for a table read from the kernel, what its registry records) checked
// against t's own rows: tc's digest bound to t's fingerprint must be it.
// A digest not made for exactly these rows from these inputs with tc's
// seed does not match, whoever wrote it.
func (t *Table) BuiltFrom(tc *TableConfig) bool {
	return t.Digest != (Digest{}) && InputDigest(tc, Fingerprint(t)) == t.Digest
}
