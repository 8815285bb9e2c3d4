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
//
// A table's fingerprint is computed once and kept with it (a plan, its
// diff and the read-back check all ask for it): a Table must not be
// changed once it has been fingerprinted.
func Fingerprint(t *Table) string {
	if fp := t.fp.Load(); fp != nil {
		return *fp
	}
	fp := fingerprint(t)
	t.fp.Store(&fp)
	return fp
}

func fingerprint(t *Table) string {
	addrs := make([][16]byte, len(t.Backends))
	for i, b := range t.Backends {
		addrs[i] = b.IP.As16()
	}
	h := sha256.New()
	const chunk = 32 * 1024
	buf := make([]byte, 0, chunk)
	for _, r := range t.Rows {
		buf = append(buf, addrs[r.Primary][:]...)
		buf = append(buf, addrs[r.Secondary][:]...)
		if len(buf) == chunk {
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
