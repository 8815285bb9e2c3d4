package table

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
)

// Digest is a table's input digest (InputDigest); zero is none.
type Digest [32]byte

// InputDigest is the digest of what decides the table tc builds into,
// bound to what it built: HMAC-SHA-256 keyed by tc's seed over a
// versioned encoding of its name, hash key, binds, backends (address,
// state, health, weight and domain, in order) and balance factor, then
// rows (each row's two hops as positions in the backend list, a byte
// each) and fp, their fingerprint. Health checks and the ramp interval
// decide no row and are left out.
//
// Two tables with the same digest were built from the same inputs into
// these rows, whose fingerprint is fp, so one may stand for the other
// without a build; and a live table whose rows and inputs check out
// against its digest has the fingerprint its registry records, without
// hashing 2 MB of hops again (BuiltFrom). The seed keys it: the digest
// reveals neither key nor seed (HMAC's output), and one who holds the
// kernel's maps but not the config (the kernel never holds the seed)
// cannot make the digest that would pass other rows, or another
// fingerprint, off as these inputs'.
//
// Version 2 (2026-12) added the rows: a table whose registry holds a
// version 1 digest is built again, once, and written with a version 2.
func InputDigest(tc *TableConfig, rows []Row, fp string) Digest {
	m := hmac.New(sha256.New, tc.Seed[:])
	var buf []byte
	str := func(s string) {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	str("director table inputs v2")
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
	if q := tc.QUIC; q.On() {
		// Likewise: what routes QUIC by connection ID, only when set.
		str("quic")
		buf = append(buf, q.ConfigID, q.ServerIDLen, q.NonceLen)
		if q.Encrypted {
			// Under the seed's HMAC: the digest does not reveal it.
			str("key")
			buf = append(buf, q.Key[:]...)
		}
		for _, b := range tc.Backends {
			str(string(b.ServerID))
		}
		for ci, q := range q.Configs()[1:] {
			str("quicmore")
			buf = append(buf, q.ConfigID, q.ServerIDLen, q.NonceLen)
			if q.Encrypted {
				str("key")
				buf = append(buf, q.Key[:]...)
			}
			for _, b := range tc.Backends {
				str(string(b.ServerIDIn(ci + 1)))
			}
		}
	}
	m.Write(buf)
	hops := make([]byte, 0, 2*len(rows))
	for _, r := range rows {
		hops = append(hops, byte(r.Primary), byte(r.Secondary)) // positions: at most 256 backends
	}
	m.Write(hops)
	buf = buf[:0]
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
// against t's own inputs and rows: tc's digest over them, bound to t's
// fingerprint, must be it. A digest not made for exactly these rows from
// these inputs with tc's seed does not match, whoever wrote it.
//
// The fingerprint checked first is the one t's registry claims (Claimed),
// which costs no hashing of the rows: when the digest checks out with it,
// it is the fingerprint of these rows (the digest binds the two, and only
// the seed's holder makes digests), and t keeps it as its own. Else t's
// fingerprint is computed.
func (t *Table) BuiltFrom(tc *TableConfig) bool {
	if t.Digest == (Digest{}) || t.Unbuilt || !sameBuild(tc, t) {
		return false
	}
	if fp := t.Claimed; fp != "" && InputDigest(tc, t.Rows, fp) == t.Digest {
		t.fp.CompareAndSwap(nil, &fp)
		return Fingerprint(t) == fp // it was computed already: it must be this one
	}
	return InputDigest(tc, t.Rows, Fingerprint(t)) == t.Digest
}

// sameBuild reports whether t holds what tc's table would beside its rows:
// name, key, binds, balance factor and backends.
func sameBuild(tc *TableConfig, t *Table) bool {
	if t.Name != tc.Name || t.HashKey != tc.HashKey || t.Balance != tc.Balance || t.QUIC != tc.QUIC || t.History != tc.History ||
		len(t.Backends) != len(tc.Backends) || len(t.Rows) != Rows {
		return false
	}
	if !slices.Equal(t.Binds, tc.Binds) {
		return false
	}
	for i, b := range tc.Backends {
		if !sameBackend(t.Backends[i], b) {
			return false
		}
	}
	return true
}

// BuiltRows is a table a plan built (not taken from what was live), its
// rows carried in the plan so that applying the plan need not build it
// again: Rows as InputDigest hashes them (each row's primary and secondary
// as positions in the backend list, a byte each; base64 in JSON), Digest,
// the table's input digest, in hex, and Seal, a MAC of the digest under a
// key of the host's (a Sealer's), in hex. The input digest is keyed by the
// table's seed, which the plan file holds too: whoever can edit the file
// could make one for rows of their own. The seal is what they cannot make.
type BuiltRows struct {
	Index  int    `json:"index"`
	Rows   []byte `json:"rows"`
	Digest string `json:"digest"`
	Seal   string `json:"seal"`
}

// Sealer seals plans' carried rows with a key of the host's, one only its
// root can read (a plan is made and applied where the pins are).
type Sealer []byte

// seal is the MAC of a table's input digest, and its place, in hex.
func (k Sealer) seal(i int, d Digest) string {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("director carried rows v1"))
	m.Write(binary.BigEndian.AppendUint32(nil, uint32(i)))
	m.Write(d[:])
	return hex.EncodeToString(m.Sum(nil))
}

// CarryBuilt lists the tables of ts that are not in base (by identity:
// the live tables a plan took as they were) with their rows, sealed with
// k. Without a key it carries none.
func CarryBuilt(ts, base []*Table, k Sealer) []BuiltRows {
	if len(k) == 0 {
		return nil
	}
	var out []BuiltRows
	for i, t := range ts {
		if t.Unbuilt || t.Digest == (Digest{}) || slices.Contains(base, t) {
			continue
		}
		rows := make([]byte, 0, 2*len(t.Rows))
		for _, r := range t.Rows {
			rows = append(rows, byte(r.Primary), byte(r.Secondary))
		}
		out = append(out, BuiltRows{Index: i, Rows: rows, Digest: hex.EncodeToString(t.Digest[:]), Seal: k.seal(i, t.Digest)})
	}
	return out
}

// FromBuilt is table i of a config, tc, from the rows a plan carried for
// it, or nil when it carried none that check out: sealed with k, rows of
// every row naming backends tc has, whose input digest, computed from tc
// and them, is the one carried. What apply writes is read back and
// checked against the plan's fingerprints as any table is.
func FromBuilt(carried []BuiltRows, i int, tc *TableConfig, k Sealer) *Table {
	if len(k) == 0 {
		return nil
	}
	for _, c := range carried {
		if c.Index != i {
			continue
		}
		var d Digest
		if len(c.Rows) != 2*Rows || hex.DecodedLen(len(c.Digest)) != len(d) {
			return nil
		}
		if _, err := hex.Decode(d[:], []byte(c.Digest)); err != nil {
			return nil
		}
		if !hmac.Equal([]byte(c.Seal), []byte(k.seal(i, d))) {
			return nil // not sealed by this host: the file was edited, or the plan made elsewhere
		}
		t := &Table{Name: tc.Name, HashKey: tc.HashKey, Binds: slices.Clone(tc.Binds), Backends: slices.Clone(tc.Backends),
			Rows: make([]Row, Rows), Balance: tc.Balance, QUIC: tc.QUIC, History: tc.History}
		n := len(tc.Backends)
		for r := range t.Rows {
			p, s := int(c.Rows[2*r]), int(c.Rows[2*r+1])
			if p >= n || s >= n {
				return nil
			}
			t.Rows[r] = Row{Primary: uint32(p), Secondary: uint32(s)}
			if !tc.Backends[p].Good() {
				t.NoGoodRows++
			}
		}
		if InputDigest(tc, t.Rows, Fingerprint(t)) != d {
			return nil
		}
		t.Digest = d
		return t
	}
	return nil
}
