package loader

import (
	"time"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

// CounterNames are the global counters' names, by index: enum
// dir_counter's in bpf/director.h (abi.DirectorCounterNames).
func CounterNames() []string { return abi.DirectorCounterNames }

// Traffic is packets and bytes (of the original IP packets).
type Traffic struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// StatsVersion is the version of the stats document.
const StatsVersion = 1

// Stats is every counter, summed over CPUs, and the attached interfaces'
// own counters: 'director stats --json' (docs/formats.md).
type Stats struct {
	Version    int               `json:"version"`
	Time       time.Time         `json:"time"`
	Global     map[string]uint64 `json:"global"`
	Tables     []TableStats      `json:"tables"`
	Interfaces []InterfaceStats  `json:"interfaces"`
}

// TableStats is one live table's traffic and its backends'.
type TableStats struct {
	Name     string         `json:"name"`
	StatsID  int            `json:"stats_id"`
	Traffic  Traffic        `json:"traffic"`
	Backends []BackendStats `json:"backends"`
	// QUIC, for a table with QUIC-LB routing, is its QUIC counters by the
	// config its packets' connection IDs carry: the table's own config
	// first, then any other that packets carried, then those whose ID
	// could not be read.
	QUIC []QUICStats `json:"quic,omitempty"`
}

// QUICStats are a table's QUIC-LB counters (quic_routed, quic_fallback_*,
// quic_icmp_routed; those not zero) for the packets whose connection ID
// carries config rotation ConfigID, nil for those none was read from.
type QUICStats struct {
	ConfigID *uint8            `json:"config_id"`
	Counters map[string]uint64 `json:"counters"`
}

// quicStats reads a table's QUIC counters (TableStats.QUIC): each of its
// own configs' (the mask own), in increasing config ID, then those of other
// config rotations and of packets whose ID was not read, where they count
// any.
func (d *Director) quicStats(statsID int, own uint8) ([]QUICStats, error) {
	if d.Maps.QuicStats == nil { // pins of a build without them
		return nil, nil
	}
	block, err := counterBlock(d.Maps.QuicStats, statsID)
	if err != nil || block == nil {
		return nil, err
	}
	defer block.Close()
	var out, others []QUICStats
	for i := 0; i <= int(abi.QUICNoID); i++ {
		var per []abi.QUICStats
		if err := block.Lookup(uint32(i), &per); err != nil {
			return nil, err
		}
		qs := QUICStats{Counters: map[string]uint64{}}
		for _, p := range per {
			for c := range p.C {
				if n := CounterNames(); abi.CQUICRouted+c < len(n) && p.C[c] != 0 {
					qs.Counters[n[abi.CQUICRouted+c]] += p.C[c]
				}
			}
		}
		if i < int(abi.QUICNoID) {
			id := uint8(i)
			qs.ConfigID = &id
		}
		switch {
		case i < int(abi.QUICNoID) && own&(1<<i) != 0:
			out = append(out, qs)
		case len(qs.Counters) > 0:
			others = append(others, qs)
		}
	}
	return append(out, others...), nil
}

// BackendStats is what one backend was sent as primary.
type BackendStats struct {
	IP      string `json:"ip"`
	State   string `json:"state"`
	Healthy bool   `json:"healthy"`
	Weight  int    `json:"weight"`
	Domain  string `json:"domain,omitempty"`
	// PrimaryRows are the rows it is primary for; with a balance factor,
	// Cap is its cap on them (table.Caps) and AtCap whether it is there.
	PrimaryRows int  `json:"primary_rows"`
	Cap         int  `json:"cap,omitempty"`
	AtCap       bool `json:"at_cap,omitempty"`
	Traffic
}

func possibleCPUs() int {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return 1
	}
	return n
}

// GlobalCounters sums the global counters over CPUs.
func (d *Director) GlobalCounters() ([]uint64, error) {
	var per []abi.Counters
	if err := d.Maps.Counters.Lookup(uint32(0), &per); err != nil {
		return nil, err
	}
	out := make([]uint64, len(CounterNames()))
	for _, c := range per {
		for i := range out {
			out[i] += c.C[i]
		}
	}
	return out, nil
}

func (d *Director) traffic(m *ebpf.Map, key uint32) (Traffic, error) {
	var per []abi.Traffic
	if err := m.Lookup(key, &per); err != nil {
		return Traffic{}, err
	}
	var t Traffic
	for _, p := range per {
		t.Packets += p.Packets
		t.Bytes += p.Bytes
	}
	return t, nil
}

// Stats reads every counter.
func (d *Director) Stats() (*Stats, error) {
	g, err := d.GlobalCounters()
	if err != nil {
		return nil, err
	}
	s := &Stats{Version: StatsVersion, Time: time.Now().UTC(), Global: map[string]uint64{}, Tables: []TableStats{}}
	if s.Interfaces, err = d.InterfaceStats(); err != nil {
		return nil, err
	}
	for i, n := range CounterNames() {
		s.Global[n] = g[i]
	}
	live, err := d.Live()
	if err != nil {
		return nil, err
	}
	for i, lt := range live {
		ts := TableStats{Name: table.DisplayName(lt.Table.Name, i), StatsID: lt.StatsID}
		prim := make([]int, len(lt.Table.Backends))
		for _, r := range lt.Table.Rows {
			prim[r.Primary]++
		}
		caps := table.Caps(lt.Table.Backends, lt.Table.Balance)
		block, err := counterBlock(d.Maps.BackendTraffic, lt.StatsID)
		if err != nil {
			return nil, err
		}
		for j, b := range lt.Table.Backends {
			var tr Traffic
			if block != nil { // none: the counters an upgrade left behind, until the next apply
				if tr, err = d.traffic(block, uint32(lt.Stat[j])); err != nil {
					block.Close()
					return nil, err
				}
			}
			// The datapath counts backends only; a table is their sum.
			ts.Traffic.Packets += tr.Packets
			ts.Traffic.Bytes += tr.Bytes
			bs := BackendStats{IP: b.IP.String(), State: b.State.String(), Healthy: b.Healthy, Weight: int(b.W()), Domain: b.Domain, PrimaryRows: prim[j], Traffic: tr}
			if caps != nil && b.Good() {
				bs.Cap, bs.AtCap = caps[j], prim[j] >= caps[j]
			}
			ts.Backends = append(ts.Backends, bs)
		}
		if block != nil {
			block.Close()
		}
		if lt.Table.QUIC.On() {
			if ts.QUIC, err = d.quicStats(lt.StatsID, mapimage.QUICConfigs(lt.Table)); err != nil {
				return nil, err
			}
		}
		s.Tables = append(s.Tables, ts)
	}
	return s, nil
}
