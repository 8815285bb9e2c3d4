package loader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf"
	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

// A table's counters are inner maps at its stats id: its backends'
// traffic in backend_traffic and, with QUIC-LB routing, its QUIC counters
// in quic_stats. Each is made, zeroed, when a table first takes its stats
// id, so kernel memory for counters grows with the tables live rather
// than with the most the datapath can hold.

// counterBlock opens the inner map outer holds at statsID; nil, with no
// error, where it holds none.
func counterBlock(outer *ebpf.Map, statsID int) (*ebpf.Map, error) {
	var id ebpf.MapID
	err := outer.Lookup(uint32(statsID), &id)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the counters of stats id %d: %w", statsID, err)
	}
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return nil, fmt.Errorf("opening the counters of stats id %d: %w", statsID, err)
	}
	return m, nil
}

// newCounterBlock installs fresh, zeroed counters at statsID in outer
// (the map name), in place of any there. The update waits for an RCU
// grace period, after which no packet counts in the counters replaced.
func (d *Director) newCounterBlock(name string, outer *ebpf.Map, statsID int) error {
	inner, err := ebpf.NewMap(d.spec.Maps[name].InnerMap)
	if err != nil {
		return fmt.Errorf("creating the counters of stats id %d: %w", statsID, err)
	}
	defer inner.Close()
	if err := outer.Put(uint32(statsID), inner); err != nil {
		return fmt.Errorf("installing the counters of stats id %d: %w", statsID, err)
	}
	return nil
}

// resetCounters gives a table the counters it is to count in, before it
// goes live: fresh ones for a table new to its stats id (or one whose
// counters an upgrade of the maps left behind), and, for one that keeps
// its stats id, zeroed entries for its backends new to it.
func (d *Director) resetCounters(statsID int, old *mapimage.LiveTable, t *table.Table, stat []uint8) error {
	tr, err := counterBlock(d.Maps.BackendTraffic, statsID)
	if err != nil {
		return err
	}
	if old == nil || tr == nil {
		if tr != nil {
			tr.Close()
		}
		if err := d.newCounterBlock(bpf.DirectorMapBackendTraffic, d.Maps.BackendTraffic, statsID); err != nil {
			return err
		}
	} else {
		defer tr.Close()
		had := map[uint8]bool{}
		for i := range old.Table.Backends {
			had[old.Stat[i]] = true
		}
		for i := range t.Backends {
			if !had[stat[i]] {
				if err := tr.Put(uint32(stat[i]), make([]abi.Traffic, possibleCPUs())); err != nil {
					return fmt.Errorf("zeroing the counters of stats id %d: %w", statsID, err)
				}
			}
		}
	}
	return d.resetQUICCounters(statsID, old, t)
}

// resetQUICCounters gives a table with QUIC-LB routing its QUIC counters
// as resetCounters does, and takes a table new to its stats id without
// routing away from the counters an earlier table left there (it would
// count them again if it turned routing on).
func (d *Director) resetQUICCounters(statsID int, old *mapimage.LiveTable, t *table.Table) error {
	if d.Maps.QuicStats == nil {
		return nil
	}
	q, err := counterBlock(d.Maps.QuicStats, statsID)
	if err != nil {
		return err
	}
	if q != nil {
		q.Close()
	}
	switch {
	case t.QUIC.On() && (old == nil || q == nil):
		return d.newCounterBlock(bpf.DirectorMapQuicStats, d.Maps.QuicStats, statsID)
	case !t.QUIC.On() && old == nil && q != nil:
		if err := d.Maps.QuicStats.Delete(uint32(statsID)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing the QUIC counters of stats id %d: %w", statsID, err)
		}
	}
	return nil
}

// adoptCounters gives each live table the counters the maps lack for it:
// after an upgrade from a build that kept every table's counters in one
// array, remade empty (pinnedLoad.counters), until then none would count.
func (d *Director) adoptCounters() error {
	live, err := d.Live()
	if err != nil {
		return fmt.Errorf("reading the live tables' counters: %w", err)
	}
	return concurrently(len(live), func(i int) error {
		lt := live[i]
		return d.resetCounters(lt.StatsID, &lt, lt.Table, lt.Stat)
	})
}
