package loader

import (
	"fmt"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

// decodeQUIC gives the backends of lt (read from the table in the same
// slot) the server IDs qt holds, and checks that the index holds exactly
// the serving ones.
func decodeQUIC(qt *abi.QUICTable, lt *LiveTable) error {
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
		if !quicFinds(qt, sid, e.StatPlus1) {
			return fmt.Errorf("corrupt QUIC IDs: backend %d (%s) is serving and its server ID is not where packets look for it", i, t.Backends[i].IP)
		}
	}
	if indexed != serving {
		return fmt.Errorf("corrupt QUIC IDs: %d entries for %d serving backends", indexed, serving)
	}
	return nil
}

// quicFinds probes for sid as the program does.
func quicFinds(qt *abi.QUICTable, sid []byte, statPlus1 uint8) bool {
	var want [abi.QUICMaxSID]byte
	copy(want[:], sid)
	home := mapimage.QUICHome(sid)
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
