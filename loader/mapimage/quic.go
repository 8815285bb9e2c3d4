package mapimage

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/table"
	"github.com/director/director/table/quiclb/cidcipher"
)

// QUIC-LB server IDs as the datapath finds them (bpf/director.h, struct
// dir_quic_table): the serving backends' IDs in an open-addressing table
// that a packet probes from its ID's home, and every backend's ID by its
// position, for reading the table back.

// QUICWords is a server ID as the program reads it: its first eight bytes
// and the rest, zero-padded, as little-endian words.
func QUICWords(sid []byte) (w0, w1 uint64) {
	var b [16]byte
	copy(b[:], sid)
	return binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])
}

// QUICHome is where the program starts looking for a server ID.
func QUICHome(sid []byte) uint32 {
	w0, w1 := QUICWords(sid)
	return uint32((w0*abi.QUICMult[0]+w1*abi.QUICMult[1])>>32) & (abi.QUICSlots - 1)
}

// EncodeQUIC lays out t's server IDs; stat gives each backend's counter
// index. Entries are placed Robin Hood style, so none lies far from its
// home; one that would lie past the program's probes is an error (only
// IDs chosen to collide come near).
func EncodeQUIC(t *table.Table, stat []uint8) (*abi.QUICTable, error) {
	qt := new(abi.QUICTable)
	if !t.QUIC.On() {
		return qt, nil
	}
	type placed struct {
		e    abi.QUICEntry
		home uint32
	}
	var slots [abi.QUICSlots]*placed
	for i, b := range t.Backends {
		if len(b.ServerID) != int(t.QUIC.ServerIDLen) {
			return nil, fmt.Errorf("backends[%d] (%s): a server ID of %d bytes; the table's are %d", i, b.IP, len(b.ServerID), t.QUIC.ServerIDLen)
		}
		var e abi.QUICEntry
		copy(e.Sid[:], b.ServerID)
		e.StatPlus1 = stat[i] + 1
		qt.Ids[i] = e
		if !b.Serving() {
			continue
		}
		p := &placed{e: e, home: QUICHome([]byte(b.ServerID))}
		for d := uint32(0); ; d++ {
			if d >= abi.QUICProbes {
				return nil, fmt.Errorf("backends[%d] (%s): its server ID %s and others of the table share too few places "+
					"for the datapath to find them all; choose other server IDs", i, b.IP, b.ServerID)
			}
			at := (p.home + d) & (abi.QUICSlots - 1)
			o := slots[at]
			if o == nil {
				slots[at] = p
				break
			}
			// The one nearer its home moves on.
			if od := (at - o.home) & (abi.QUICSlots - 1); od < d {
				slots[at] = p
				p, d = o, od
			}
		}
	}
	for i, p := range slots {
		if p != nil {
			qt.E[i] = p.e
		}
	}
	return qt, nil
}

// DecodeQUIC gives the backends of lt (read from the table in the same
// slot) the server IDs qt holds, and checks that the index holds exactly
// the serving ones.
func DecodeQUIC(qt *abi.QUICTable, lt *LiveTable) error {
	t := lt.Table
	if !t.QUIC.On() {
		return nil
	}
	l := int(t.QUIC.ServerIDLen)
	indexed := 0
	for _, e := range qt.E {
		if e.StatPlus1 != 0 {
			indexed++
		}
	}
	serving := 0
	for i := range t.Backends {
		e := qt.Ids[i]
		if e.StatPlus1 != lt.Stat[i]+1 {
			return fmt.Errorf("corrupt QUIC IDs: backend %d's entry names counter %d, not %d", i, int(e.StatPlus1)-1, lt.Stat[i])
		}
		sid := e.Sid[:l]
		t.Backends[i].ServerID = table.ServerID(sid)
		if !t.Backends[i].Serving() {
			continue
		}
		serving++
		if !QUICFinds(qt, sid, e.StatPlus1) {
			return fmt.Errorf("corrupt QUIC IDs: backend %d (%s) is serving and its server ID is not where packets look for it", i, t.Backends[i].IP)
		}
	}
	if indexed != serving {
		return fmt.Errorf("corrupt QUIC IDs: %d entries for %d serving backends", indexed, serving)
	}
	return nil
}

// QUICFinds probes for sid as the program does.
func QUICFinds(qt *abi.QUICTable, sid []byte, statPlus1 uint8) bool {
	var want [abi.QUICMaxSID]byte
	copy(want[:], sid)
	home := QUICHome(sid)
	for d := uint32(0); d < abi.QUICProbes; d++ {
		e := qt.E[(home+d)&(abi.QUICSlots-1)]
		if e.StatPlus1 == 0 {
			return false
		}
		if e.Sid == want {
			return e.StatPlus1 == statPlus1
		}
	}
	return false
}

// EncodeQUICKey is t's QUIC-LB key as the program takes it: its AES-128
// round keys. As secret as the key.
func EncodeQUICKey(t *table.Table) abi.AESKey {
	rk := cidcipher.Schedule(t.QUIC.Key)
	return abi.AESKey{Enc: rk.Enc, Dec: rk.Dec}
}

// DecodeQUICKey gives lt's table the key k holds (its first round key is
// the key itself), checking that the rest is that key's schedule.
func DecodeQUICKey(k *abi.AESKey, lt *LiveTable) error {
	var key table.Key
	for i := 0; i < 4; i++ {
		binary.LittleEndian.PutUint32(key[4*i:], k.Enc[i])
	}
	if rk := cidcipher.Schedule(key); rk.Enc != k.Enc || rk.Dec != k.Dec {
		return errors.New("corrupt QUIC key: its round keys are not its schedule")
	}
	lt.Table.QUIC.Encrypted, lt.Table.QUIC.Key = true, key
	return nil
}
