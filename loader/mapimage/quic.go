package mapimage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

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

// QUICImage is one QUIC-LB config of a table as the datapath holds it, at
// abi.QUICKey(slot, Config) in maps quic_ids and quic_keys.
type QUICImage struct {
	Config uint8 // its config rotation bits
	IDs    *abi.QUICTable
	Key    *abi.AESKey // its round keys, for encrypted IDs; as secret as the key
}

// QUICConfigs is the mask of t's QUIC-LB configs (dir_table.quic_configs):
// bit c for config rotation c.
func QUICConfigs(t *table.Table) uint8 {
	var m uint8
	for _, c := range t.QUIC.Configs() {
		m |= 1 << c.ConfigID
	}
	return m
}

// EncodeQUIC lays out each of t's QUIC-LB configs: its lengths, its key,
// and the backends' server IDs in it; stat gives each backend's counter
// index.
func EncodeQUIC(t *table.Table, stat []uint8) ([]QUICImage, error) {
	var imgs []QUICImage
	for ci, q := range t.QUIC.Configs() {
		img, err := encodeQUICConfig(t, ci, q, stat)
		if err != nil {
			if len(t.QUIC.Configs()) > 1 {
				err = fmt.Errorf("QUIC config %d: %w", q.ConfigID, err)
			}
			return nil, err
		}
		imgs = append(imgs, img)
	}
	return imgs, nil
}

// encodeQUICConfig lays out t's config q, at place ci of its configs.
// Entries are placed Robin Hood style, so none lies far from its home; one
// that would lie past the program's probes is an error (only IDs chosen to
// collide come near).
func encodeQUICConfig(t *table.Table, ci int, q table.QUICConfig, stat []uint8) (QUICImage, error) {
	qt := &abi.QUICTable{SidLen: q.ServerIDLen, CidLen: uint8(q.CIDLen())}
	img := QUICImage{Config: q.ConfigID, IDs: qt}
	if q.Encrypted {
		qt.Enc = 1
		rk := cidcipher.Schedule(q.Key)
		img.Key = &abi.AESKey{Enc: rk.Enc, Dec: rk.Dec}
	}
	type placed struct {
		e    abi.QUICEntry
		home uint32
	}
	var slots [abi.QUICSlots]*placed
	for i, b := range t.Backends {
		sid := b.ServerIDIn(ci)
		if len(sid) != int(q.ServerIDLen) {
			return QUICImage{}, fmt.Errorf("backends[%d] (%s): a server ID of %d bytes; the table's are %d", i, b.IP, len(sid), q.ServerIDLen)
		}
		var e abi.QUICEntry
		copy(e.Sid[:], sid)
		e.StatPlus1 = stat[i] + 1
		qt.Ids[i] = e
		if !b.Serving() {
			continue
		}
		p := &placed{e: e, home: QUICHome([]byte(sid))}
		for d := uint32(0); ; d++ {
			if d >= abi.QUICProbes {
				return QUICImage{}, fmt.Errorf("backends[%d] (%s): its server ID %s and others of the table share too few places "+
					"for the datapath to find them all; choose other server IDs", i, b.IP, sid)
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
	return img, nil
}

// DecodeQUIC gives lt's table (read from the table in the same slot, whose
// quic_configs is configs) its QUIC-LB configs and the backends their
// server IDs from imgs, one for each bit of configs in increasing order,
// checking that each index holds exactly the serving backends and each key
// is a key's schedule. The kernel keeps no order of the configs: they read
// back in increasing config ID, which is how a config lists them once
// canonical (table.QUIC's order decides no packet).
func DecodeQUIC(configs uint8, imgs []QUICImage, lt *LiveTable) error {
	if configs == 0 {
		return nil
	}
	var m uint8
	for _, img := range imgs {
		m |= 1 << img.Config
	}
	if m != configs || len(imgs) != bits.OnesCount8(configs) || configs>>(table.MaxQUICConfigID+1) != 0 {
		return fmt.Errorf("corrupt table: QUIC configs %#x", configs)
	}
	t := lt.Table
	t.QUIC = table.QUIC{}
	for ci, img := range imgs {
		qt := img.IDs
		l, cid := int(qt.SidLen), int(qt.CidLen)
		if l < 1 || l > table.MaxServerIDLen || cid < 1+l+table.MinNonceLen || cid > table.MaxCIDLen || qt.Enc > 1 || (qt.Enc == 1) != (img.Key != nil) {
			return fmt.Errorf("corrupt QUIC config %d: lengths %d/%d, encrypted %d", img.Config, l, cid, qt.Enc)
		}
		q := table.QUICConfig{ConfigID: img.Config, ServerIDLen: uint8(l), NonceLen: uint8(cid - 1 - l)}
		if img.Key != nil {
			key, err := decodeQUICKey(img.Key)
			if err != nil {
				return err
			}
			q.Encrypted, q.Key = true, key
		}
		if ci == 0 {
			t.QUIC.QUICConfig = q
		} else {
			t.QUIC.More[ci-1] = q
		}
		if err := decodeQUICIDs(qt, ci, l, lt); err != nil {
			if len(imgs) > 1 {
				err = fmt.Errorf("QUIC config %d: %w", img.Config, err)
			}
			return err
		}
	}
	return nil
}

// decodeQUICIDs gives lt's backends their server IDs of l bytes in the
// config at place ci from qt.
func decodeQUICIDs(qt *abi.QUICTable, ci, l int, lt *LiveTable) error {
	t := lt.Table
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
		t.Backends[i].SetServerIDIn(ci, table.ServerID(sid))
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

// decodeQUICKey is the key k holds (its first round key is the key
// itself), checking that the rest is that key's schedule.
func decodeQUICKey(k *abi.AESKey) (table.Key, error) {
	var key table.Key
	for i := 0; i < 4; i++ {
		binary.LittleEndian.PutUint32(key[4*i:], k.Enc[i])
	}
	if rk := cidcipher.Schedule(key); rk.Enc != k.Enc || rk.Dec != k.Dec {
		return table.Key{}, errors.New("corrupt QUIC key: its round keys are not its schedule")
	}
	return key, nil
}
