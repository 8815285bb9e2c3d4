package model

import (
	"github.com/director/director/bpf/abi"
	"github.com/director/director/table"
	"github.com/director/director/table/quiclb/cidcipher"
)

// QUIC-LB routing's counters (enum dir_counter): a UDP packet of a table
// with a "quic" block is sent to the backend its destination connection ID
// names (QUICRouted), or by its row, for the reason its counter gives.
const (
	QUICRouted      = abi.CQUICRouted
	QUICShort       = abi.CQUICShort       // the payload is too short for the bytes read
	QUICCIDLen      = abi.CQUICCIDLen      // a long header's ID is over 20 bytes or too short for a server ID
	QUICUnroutable  = abi.CQUICUnroutable  // config rotation 0b111
	QUICOtherConfig = abi.CQUICOtherConfig // another config's rotation bits
	QUICUnknownID   = abi.CQUICUnknownID   // no serving backend has that server ID
)

// quicNeed is how many bytes after a connection ID's first octet the
// server ID is read from: its own length, or with encrypted IDs the whole
// of server ID and nonce, which are encrypted together.
func quicNeed(q table.QUICConfig) int {
	if q.Encrypted {
		return int(q.ServerIDLen) + int(q.NonceLen)
	}
	return int(q.ServerIDLen)
}

// quicRead is how many bytes after a connection ID's first octet the
// program reads, whatever the server ID's length: a real QUIC packet
// always has them (its header-protection sample follows the ID).
const quicRead = abi.QUICRead

// udpPayload is the UDP payload as far as the program can read it: to the
// end of the IP packet, and of the frame's first buffer.
func (pk *packet) udpPayload() []byte {
	off := pk.l4 + 8
	end := min(pk.l2len+pk.ipLen, len(pk.frame), FirstBuffer)
	if off > 0xfff || off > end { // the program's bound; headers never reach it
		return nil
	}
	return pk.frame[off:end]
}

// QUICRoute is QUIC-LB routing (docs/wire.md, "QUIC-LB connection IDs") of a
// UDP payload p to table t: QUICRouted and the index of the backend its
// destination connection ID names, or the fallback counter and -1.
//
// The ID follows the first octet in a short header (bit 7 clear); in a
// long header it follows the version and its length octet (byte 5). Its
// first octet's top three bits are the config rotation, which names one of
// t's configs; then come that config's ServerIDLen bytes of server ID
// (encrypted with the nonce, where the config has a key), and a short
// header's ID is the config's CIDLen() long. The backend must be serving:
// active, filling or draining, and healthy.
func QUICRoute(t *table.Table, p []byte) (counter, backend int) {
	counter, backend, _ = quicRoute(t, p, false)
	return counter, backend
}

// QUICRouteQuoted is QUICRoute of the UDP payload p of a packet an ICMP
// error quotes: one the server sent, so a long header's own connection ID
// is its source connection ID (after the destination's), which the server
// chose; a short header's is its destination connection ID, as for
// QUICRoute (the client's, which the table decodes where it can).
func QUICRouteQuoted(t *table.Table, p []byte) (counter, backend int) {
	counter, backend, _ = quicRoute(t, p, true)
	return counter, backend
}

// QUICNoID is the config quicRoute gives where it read no connection ID
// (the per-table counters' key, dir_quic_stats).
const QUICNoID = int(abi.QUICNoID)

// quicRoute is QUICRoute or QUICRouteQuoted, and the config rotation bits
// of the ID it read, or QUICNoID. The rotation bits are read first: they
// name the config, whose lengths say how the rest is read.
func quicRoute(t *table.Table, p []byte, quoted bool) (counter, backend, config int) {
	if len(p) < 1+1+quicRead {
		return QUICShort, -1, QUICNoID
	}
	cidLen, base, long := 0, 1, p[0]&0x80 != 0
	if long {
		if len(p) < 6+1+quicRead {
			return QUICShort, -1, QUICNoID
		}
		cidLen, base = int(p[5]), 6
		if quoted {
			// The destination ID, then the source ID's length and the
			// source ID.
			if cidLen > table.MaxCIDLen {
				return QUICCIDLen, -1, QUICNoID
			}
			if len(p) < 6+cidLen+1 {
				return QUICShort, -1, QUICNoID
			}
			cidLen, base = int(p[6+cidLen]), 6+cidLen+1
		}
		if cidLen > table.MaxCIDLen || cidLen < 1 {
			return QUICCIDLen, -1, QUICNoID
		}
	}
	if len(p) < base+1+quicRead {
		return QUICShort, -1, QUICNoID
	}
	cid := p[base:]
	rot := cid[0] >> 5
	if rot == abi.QUICUnroutable {
		return QUICUnroutable, -1, int(rot)
	}
	q, ci, ok := t.QUIC.Config(rot)
	if !ok {
		return QUICOtherConfig, -1, int(rot)
	}
	if !long {
		cidLen = q.CIDLen()
	} else if cidLen < 1+quicNeed(q) {
		return QUICCIDLen, -1, int(rot)
	}
	if len(p) < base+max(cidLen, 1+quicNeed(q)) {
		return QUICShort, -1, int(rot)
	}
	sid := table.ServerID(cid[1 : 1+q.ServerIDLen])
	if q.Encrypted {
		c, err := cidcipher.New(q.Key, int(q.ServerIDLen), int(q.NonceLen))
		if err != nil {
			return QUICCIDLen, -1, int(rot) // the config's lengths: refused before any table is built
		}
		plain := make([]byte, q.ServerIDLen)
		c.ServerID(plain, cid[1:1+c.Len()])
		sid = table.ServerID(plain)
	}
	for i, b := range t.Backends {
		if b.ServerIDIn(ci) == sid && b.Serving() {
			return QUICRouted, i, int(rot)
		}
	}
	return QUICUnknownID, -1, int(rot)
}

// QUICDestID is the destination connection ID of the QUIC packet p (a UDP
// payload) as far as p holds it: a long header's, of the length it gives,
// or a short header's, of the length of q's config its rotation bits name
// (of 1 + DIR_QUIC_READ bytes where they name none). nil where p is too
// short for its first octet (and a long header's length).
func QUICDestID(p []byte, q table.QUIC) []byte {
	switch {
	case len(p) > 6 && p[0]&0x80 != 0:
		return p[6:min(len(p), 6+int(p[5]))]
	case len(p) > 1 && p[0]&0x80 == 0:
		n := 1 + quicRead
		if c, _, ok := q.Config(p[1] >> 5); ok {
			n = c.CIDLen()
		}
		return p[1:min(len(p), 1+n)]
	}
	return nil
}

// QUICServerID is the server ID a whole connection ID cid carries in q's
// config its rotation bits name (decrypted, where that config has a key),
// and the config's place in q.Configs; ok is false where they name none of
// q's configs or cid is too short for it.
func QUICServerID(q table.QUIC, cid []byte) (sid table.ServerID, ci int, ok bool) {
	if len(cid) == 0 {
		return "", -1, false
	}
	c, ci, ok := q.Config(cid[0] >> 5)
	if !ok || len(cid) < 1+quicNeed(c) {
		return "", -1, false
	}
	if !c.Encrypted {
		return table.ServerID(cid[1 : 1+c.ServerIDLen]), ci, true
	}
	ciph, err := cidcipher.New(c.Key, int(c.ServerIDLen), int(c.NonceLen))
	if err != nil {
		return "", -1, false
	}
	plain := make([]byte, c.ServerIDLen)
	ciph.ServerID(plain, cid[1:1+ciph.Len()])
	return table.ServerID(plain), ci, true
}
