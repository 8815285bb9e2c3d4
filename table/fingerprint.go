package table

import (
	"crypto/sha256"
	"encoding/hex"
)

// Fingerprint identifies a table's forwarding behaviour: SHA-256 over a
// version tag, the table's hash_key, and every row's primary then
// secondary address (16 bytes each, IPv4 as IPv4-mapped). The key decides
// which row a flow reads and the rows decide its hops, so two directors
// with equal fingerprints send every flow to the same hops. The key goes in
// only through SHA-256, beside data anyone may know: the fingerprint says
// whether two keys are equal and nothing else of them, so it can be shown
// and compared freely. The seed needs no place of its own: it decides only
// the rows, which are in whole (neither the kernel nor GLB's binary keeps
// it). Backend order and names do not count. A table with QUIC-LB
// routing adds its QUIC settings and, for each backend, its address,
// whether it is serving and its server ID.
//
// A table's fingerprint is computed once and kept with it (a plan, its
// diff and the read-back check all ask for it): a Table must not be
// changed once it has been fingerprinted.
func Fingerprint(t *Table) string {
	if t.Unbuilt {
		return "" // no rows to identify
	}
	if fp := t.fp.Load(); fp != nil {
		return *fp
	}
	fp := fingerprint(t)
	t.fp.Store(&fp)
	return fp
}

// fingerprintVersion starts what a fingerprint hashes. Version 1 (before
// 2026-12) hashed the rows alone, so tables differing only in their key
// had equal fingerprints.
const fingerprintVersion = "director table fingerprint v2\x00"

func fingerprint(t *Table) string {
	addrs := make([][16]byte, len(t.Backends))
	for i, b := range t.Backends {
		addrs[i] = b.IP.As16()
	}
	h := sha256.New()
	h.Write([]byte(fingerprintVersion))
	h.Write(t.HashKey[:])
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
	if t.QUIC.On() {
		// A QUIC packet may go where its connection ID says, so what
		// decides that is part of the behaviour; only when on, so that
		// other tables' fingerprints stay as they were.
		buf = append(buf[:0], "quic"...)
		buf = append(buf, t.QUIC.ConfigID, t.QUIC.ServerIDLen, t.QUIC.NonceLen)
		if t.QUIC.Encrypted {
			// Like the hash key: in the hash, which does not reveal it.
			buf = append(buf, "key"...)
			buf = append(buf, t.QUIC.Key[:]...)
		}
		for i, b := range t.Backends {
			buf = append(buf, addrs[i][:]...)
			buf = append(buf, boolByte(b.Serving()), byte(len(b.ServerID)))
			buf = append(buf, b.ServerID...)
		}
		// The other configs of a table that rotates, only when there
		// are some: so that a table of one config keeps its fingerprint.
		for ci, q := range t.QUIC.Configs()[1:] {
			buf = append(buf, "quicmore"...)
			buf = append(buf, q.ConfigID, q.ServerIDLen, q.NonceLen)
			if q.Encrypted {
				buf = append(buf, "key"...)
				buf = append(buf, q.Key[:]...)
			}
			for _, b := range t.Backends {
				sid := b.ServerIDIn(ci + 1)
				buf = append(buf, byte(len(sid)))
				buf = append(buf, sid...)
			}
		}
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ShortFingerprint is the first 12 hex digits of a fingerprint, for display.
func ShortFingerprint(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}
