package table

import (
	"crypto/sha256"
	"encoding/hex"
)

// Fingerprint identifies a table's forwarding behaviour: SHA-256 over every
// row's primary then secondary address (16 bytes each, IPv4 as
// IPv4-mapped). Two directors with equal fingerprints send every flow to the
// same hops. It depends on neither keys nor backend order, so it can be
// shown and compared freely.
func Fingerprint(t *Table) string {
	h := sha256.New()
	buf := make([]byte, 0, 32*1024)
	for _, r := range t.Rows {
		p, s := t.Backends[r.Primary].IP.As16(), t.Backends[r.Secondary].IP.As16()
		buf = append(buf, p[:]...)
		buf = append(buf, s[:]...)
		if len(buf) == cap(buf) {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))
}

// ShortFingerprint is the first 12 hex digits of a fingerprint, for display.
func ShortFingerprint(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}
