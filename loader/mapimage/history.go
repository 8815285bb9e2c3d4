package mapimage

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/table"
	"github.com/director/director/table/bindmap"
)

// A table's history as the kernel holds it (struct dir_history): the
// record names backends by counter index, as rows do; a backend the table
// no longer has (a ghost: removed within the window) keeps a counter index
// no backend of the table uses, its address in the table's hop_addr, and
// its health in the record.

// Ghost is a backend a history names that its table does not have.
type Ghost struct {
	stat uint8
	ip   netip.Addr
	up   bool
}

// GhostsOf gives counter indices to the backends h names that t does not
// have, from those t's backends (stat) leave free.
func GhostsOf(t *table.Table, h *table.History, stat []uint8) ([]Ghost, error) {
	if h.Empty() {
		return nil, nil
	}
	own := make(map[netip.Addr]bool, len(t.Backends))
	var taken [abi.MaxBackends]bool
	for i, b := range t.Backends {
		own[b.IP] = true
		taken[stat[i]] = true
	}
	var out []Ghost
	next := 0
	for _, b := range h.Backends {
		if own[b.IP] {
			continue
		}
		for next < abi.MaxBackends && taken[next] {
			next++
		}
		if next == abi.MaxBackends {
			return nil, fmt.Errorf("no counter index left for %s, a backend removed within the history window: "+
				"the table has %d backends", b.IP, len(t.Backends))
		}
		taken[next] = true
		out = append(out, Ghost{stat: uint8(next), ip: b.IP, up: b.Up})
	}
	return out, nil
}

// EncodeHistory lays h out as the datapath and the record read it, for
// t (whose backends have the counter indices stat) with ghosts.
func EncodeHistory(t *table.Table, h *table.History, stat []uint8, ghosts []Ghost) (*abi.History, error) {
	dh := new(abi.History)
	if h.Empty() {
		return dh, nil
	}
	statOf := make(map[netip.Addr]uint8, len(t.Backends)+len(ghosts))
	for i, b := range t.Backends {
		statOf[b.IP] = stat[i]
	}
	for _, g := range ghosts {
		statOf[g.ip] = g.stat
		fam, addr := bindmap.PutAddr(g.ip)
		dh.Ghosts[dh.Nghosts] = abi.HistGhost{Addr: addr, Family: fam, Stat: g.stat, Up: boolByte(g.up)}
		dh.Nghosts++
	}
	by := make([]uint8, len(h.Backends))
	for i, b := range h.Backends {
		by[i] = statOf[b.IP]
	}
	if len(h.Expires) > abi.HistEpochs {
		return nil, fmt.Errorf("history: %d epochs, the datapath holds %d", len(h.Expires), abi.HistEpochs)
	}
	dh.Valid = 1
	dh.Nepochs = uint16(len(h.Expires))
	copy(dh.Expires[:], h.Expires)
	for r := range dh.Rows {
		row := &dh.Rows[r]
		p := stat[t.Rows[r].Primary]
		for k := range row.Hop {
			row.Hop[k] = p
		}
		for k := range row.Epoch {
			row.Epoch[k] = abi.HistNone
		}
		for k, e := range h.Rows[r] {
			if e.Backend == 0 {
				break
			}
			row.Who[k], row.Epoch[k] = by[e.Backend-1], uint8(e.Epoch)
		}
		if h.Hops != nil {
			for k, b := range h.Hops[r] {
				if b == 0 {
					break
				}
				row.Hop[k] = by[b-1]
			}
		}
	}
	return dh, nil
}

// DecodeHistory reads a slot's history back for lt (decoded from the
// same slot): nil for none. It checks what it reads, as DecodeTable
// does: an entry naming a counter index no backend or Ghost has, an
// epoch past the record's, or a hop that is not in its row's record is
// a corrupt history.
func DecodeHistory(dh *abi.History, dt *abi.Table, lt *LiveTable) (*table.History, error) {
	if dh == nil || dh.Valid == 0 {
		return nil, nil
	}
	if int(dh.Nghosts) > len(dh.Ghosts) || int(dh.Nepochs) > abi.HistEpochs {
		return nil, fmt.Errorf("corrupt history: %d ghosts, %d epochs", dh.Nghosts, dh.Nepochs)
	}
	type named struct {
		ip netip.Addr
		up bool
		ok bool
	}
	var byStat [abi.MaxBackends]named
	for i, b := range lt.Table.Backends {
		byStat[lt.Stat[i]] = named{b.IP, b.Healthy, true}
	}
	for _, g := range dh.Ghosts[:dh.Nghosts] {
		a, err := AddrOf(g.Family, g.Addr)
		if err != nil || byStat[g.Stat].ok {
			return nil, fmt.Errorf("corrupt history: Ghost %v at counter %d", a, g.Stat)
		}
		if (a.Is4() && dt.HopAddr[g.Stat] != NativeFromBE(a.As4())) || (!a.Is4() && netip.AddrFrom16(dt.HopAddr6[g.Stat]) != a) {
			return nil, fmt.Errorf("corrupt history: the hop address of %s disagrees with it", a)
		}
		byStat[g.Stat] = named{a, g.Up == 1, true}
	}
	h := &table.History{Expires: append([]int64(nil), dh.Expires[:dh.Nepochs]...), Rows: make([]table.HistRow, table.Rows)}
	pos := map[netip.Addr]uint16{}
	var stats []uint8
	// Backends in the order Advance gives them (by address), so that a
	// history read back equals the one written.
	for r := range dh.Rows {
		for k, e := range dh.Rows[r].Epoch {
			if e == abi.HistNone {
				break
			}
			n := byStat[dh.Rows[r].Who[k]]
			if !n.ok || int(e) >= int(dh.Nepochs) {
				return nil, fmt.Errorf("corrupt history: row %d names counter %d, epoch %d", r, dh.Rows[r].Who[k], e)
			}
			if _, ok := pos[n.ip]; !ok {
				pos[n.ip] = 0
				stats = append(stats, dh.Rows[r].Who[k])
			}
		}
	}
	if len(stats) == 0 {
		return nil, errors.New("corrupt history: valid, and no row has an entry")
	}
	sortByAddr(stats, func(s uint8) netip.Addr { return byStat[s].ip })
	posOf := map[uint8]uint16{}
	for i, s := range stats {
		posOf[s] = uint16(i + 1)
		h.Backends = append(h.Backends, table.HistBackend{IP: byStat[s].ip, Up: byStat[s].up})
	}
	for r := range dh.Rows {
		row := &dh.Rows[r]
		for k, e := range row.Epoch {
			if e == abi.HistNone {
				break
			}
			h.Rows[r][k] = table.HistEntry{Backend: posOf[row.Who[k]], Epoch: uint16(e)}
		}
		p := dt.Rows[r].Primary
		for k, s := range row.Hop {
			if s == p {
				break
			}
			b, ok := posOf[s]
			if !ok {
				return nil, fmt.Errorf("corrupt history: row %d lists counter %d, which its record does not hold", r, s)
			}
			if h.Hops == nil {
				h.Hops = make([]table.HistHops, table.Rows)
			}
			h.Hops[r][k] = b
			h.MaxHops = max(h.MaxHops, k+1)
		}
	}
	if h.MaxHops != int(dt.HistHops) {
		return nil, fmt.Errorf("corrupt history: rows list up to %d earlier primaries, the table says %d", h.MaxHops, dt.HistHops)
	}
	return h, nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// sortByAddr sorts counter indices by the addresses addr gives them.
func sortByAddr(stats []uint8, addr func(uint8) netip.Addr) {
	slices.SortFunc(stats, func(a, b uint8) int { return addr(a).Compare(addr(b)) })
}
