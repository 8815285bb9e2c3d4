package mapimage

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/table"
	"github.com/director/director/table/bindmap"
)

// AddrOf is an address as the datapath holds it (a family, 16 bytes). This
// file encodes tables for the kernel (struct dir_table) and decodes them
// back.
func AddrOf(family uint8, b [16]byte) (netip.Addr, error) {
	switch family {
	case abi.FamilyIPv4:
		return netip.AddrFrom4([4]byte(b[:4])), nil
	case abi.FamilyIPv6:
		return netip.AddrFrom16(b), nil
	}
	return netip.Addr{}, fmt.Errorf("address family %d unknown", family)
}

// EncodeTable lays a table out as the datapath reads it. stat gives each
// backend's counter index; ghosts, the backends its history names that it
// no longer has, whose addresses packets may still list.
func EncodeTable(t *table.Table, index, statsID int, stat []uint8, ghosts []Ghost) (*abi.Table, error) {
	dt := new(abi.Table)
	dt.HashKey = t.HashKey
	copy(dt.Name[:], t.Name)
	dt.StatsId = uint32(statsID)
	dt.Index = uint16(index)
	dt.NumBackends = uint32(len(t.Backends))
	dt.NumBinds = uint32(len(t.Binds))
	dt.Balance = t.Balance
	dt.HistWindowS = uint16(min(t.History.Window, table.MaxHistoryWindow) / time.Second)
	if t.History.NoHops {
		dt.HistOff = 1
	}
	dt.QuicConfigs = QUICConfigs(t) // the configs' settings are in quic_ids (EncodeQUIC)
	if len(t.Backends) > abi.MaxBackends || len(t.Binds) > len(dt.Binds) {
		return nil, errors.New("too many backends or binds")
	}
	for i, b := range t.Backends {
		fam, addr := bindmap.PutAddr(b.IP)
		var healthy uint8
		if b.Healthy {
			healthy = 1
		}
		dt.Backends[i] = abi.Backend{Addr: addr, Family: fam, State: uint8(b.State), Healthy: healthy, Stat: stat[i], Weight: b.Weight}
		copy(dt.Backends[i].Domain[:], b.Domain)
		if b.IP.Is4() {
			dt.HopAddr[stat[i]] = NativeFromBE(b.IP.As4())
		} else {
			dt.HopAddr6[stat[i]] = b.IP.As16()
		}
	}
	for _, g := range ghosts {
		if g.ip.Is4() {
			dt.HopAddr[g.stat] = NativeFromBE(g.ip.As4())
		} else {
			dt.HopAddr6[g.stat] = g.ip.As16()
		}
	}
	// A table's backends are one family (CheckDatapath): GUE goes over
	// it.
	dt.HopFamily = uint8(abi.FamilyIPv4)
	if len(t.Backends) > 0 && !t.Backends[0].IP.Is4() {
		dt.HopFamily = uint8(abi.FamilyIPv6)
	}
	for i, b := range t.Binds {
		fam, addr := bindmap.PutAddr(b.Prefix.Addr())
		dt.Binds[i] = abi.Bind{Addr: addr, Family: fam, PrefixBits: uint8(b.Prefix.Bits()),
			Proto: uint8(b.Proto), PortStart: b.PortStart, PortEnd: b.PortEnd}
	}
	for r, row := range t.Rows {
		dt.Rows[r] = abi.Row{Primary: stat[row.Primary], Secondary: stat[row.Secondary]}
	}
	return dt, nil
}

// NativeFromBE gives the host-order uint32 whose memory holds the address
// in network order, which is what the datapath copies onto the wire.
func NativeFromBE(b [4]byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// DecodeTable reads a table back from its kernel form, checking what the
// program relies on (counter indices, hop addresses); Slot and History are
// the caller's to fill in.
func DecodeTable(dt *abi.Table) (*LiveTable, error) {
	if dt.NumBackends == 0 || int(dt.NumBackends) > abi.MaxBackends || int(dt.NumBinds) > len(dt.Binds) {
		return nil, fmt.Errorf("corrupt table: %d backends, %d binds", dt.NumBackends, dt.NumBinds)
	}
	t := &table.Table{HashKey: dt.HashKey, Rows: make([]table.Row, table.Rows), Balance: dt.Balance,
		Backends: make([]table.Backend, 0, dt.NumBackends),
		History:  table.HistorySettings{Window: time.Duration(dt.HistWindowS) * time.Second, NoHops: dt.HistOff != 0}}
	t.Name = string(bytes.TrimRight(dt.Name[:], "\x00"))
	lt := &LiveTable{StatsID: int(dt.StatsId), Index: int(dt.Index), Table: t, Stat: make([]uint8, 0, dt.NumBackends)}
	// Rows name backends by counter index; map those back to positions.
	var byStat [abi.MaxBackends]int32
	for i := range byStat {
		byStat[i] = -1
	}
	for i := 0; i < int(dt.NumBackends); i++ {
		b := dt.Backends[i]
		a, err := AddrOf(b.Family, b.Addr)
		if err != nil {
			return nil, fmt.Errorf("backend %d: %w", i, err)
		}
		t.Backends = append(t.Backends, table.Backend{IP: a, State: table.State(b.State), Healthy: b.Healthy == 1, Weight: b.Weight,
			Domain: string(bytes.TrimRight(b.Domain[:], "\x00"))})
		lt.Stat = append(lt.Stat, b.Stat)
		if byStat[b.Stat] >= 0 {
			return nil, fmt.Errorf("corrupt table: backends %d and %d share counter %d", byStat[b.Stat], i, b.Stat)
		}
		byStat[b.Stat] = int32(i)
		// The addresses packets are sent to: check they agree with the list.
		if !a.Is4() && (dt.HopFamily != uint8(abi.FamilyIPv6) || netip.AddrFrom16(dt.HopAddr6[b.Stat]) != a) {
			return nil, fmt.Errorf("corrupt table: the IPv6 hop address of backend %d (%s) disagrees with it", i, a)
		}
		if a.Is4() && dt.HopAddr[b.Stat] != NativeFromBE(a.As4()) {
			return nil, fmt.Errorf("corrupt table: the hop address of backend %d (%s) disagrees with it", i, a)
		}
	}
	for i := 0; i < int(dt.NumBinds); i++ {
		b := dt.Binds[i]
		a, err := AddrOf(b.Family, b.Addr)
		if err != nil {
			return nil, fmt.Errorf("bind %d: %w", i, err)
		}
		t.Binds = append(t.Binds, table.Bind{Prefix: netip.PrefixFrom(a, int(b.PrefixBits)), Proto: table.Proto(b.Proto),
			PortStart: b.PortStart, PortEnd: b.PortEnd})
	}
	// By counter index: not good (bit 0), of no backend (bit 1). One
	// table lookup a row, and one branch for both errors.
	var flags [256]uint8 // a row's counter indices are bytes
	for st := range flags {
		switch {
		case st >= len(byStat) || byStat[st] < 0:
			flags[st] = 2
		case !t.Backends[byStat[st]].Good():
			flags[st] = 1
		}
	}
	rows := t.Rows[:len(dt.Rows)]
	bad := 0
	for r := range rows {
		row := dt.Rows[r]
		p, s := row.Primary, row.Secondary
		fp := flags[p]
		if (fp|flags[s])&2 != 0 {
			return nil, fmt.Errorf("corrupt table: row %#x names counter %d/%d of no backend", r, p, s)
		}
		rows[r] = table.Row{Primary: uint32(byStat[p]), Secondary: uint32(byStat[s])}
		bad += int(fp) // as a build counts them, so that a live table taken for a config's is judged alike
	}
	t.NoGoodRows = bad
	return lt, nil
}
