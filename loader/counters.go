package loader

import (
	"errors"
	"fmt"
	"net/netip"

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

// ensureCounterBlock opens the inner map outer (the map name) holds at
// statsID, installing fresh counters there first where it holds none.
func (d *Director) ensureCounterBlock(name string, outer *ebpf.Map, statsID int) (*ebpf.Map, error) {
	m, err := counterBlock(outer, statsID)
	if m != nil || err != nil {
		return m, err
	}
	if err := d.newCounterBlock(name, outer, statsID); err != nil {
		return nil, err
	}
	return counterBlock(outer, statsID)
}

// resetCounters gives a table the counters it is to count in, before it
// goes live: fresh ones for a table new to its stats id, and, for one that
// keeps it, zeroed entries for its backends new to it and QUIC counters if
// it turns QUIC-LB routing on. A table that keeps its stats id, its
// backends and its routing costs no system call: every apply (a health
// flip in 'director run') passes here for every table.
func (d *Director) resetCounters(statsID int, old *mapimage.LiveTable, t *table.Table, stat []uint8) error {
	if old == nil {
		if err := d.newCounterBlock(bpf.DirectorMapBackendTraffic, d.Maps.BackendTraffic, statsID); err != nil {
			return err
		}
		return d.freshQUICCounters(statsID, t)
	}
	// New to its index: a backend the old table did not count there
	// (a removed backend's index goes to the next one added).
	had := map[uint8]netip.Addr{}
	for i, b := range old.Table.Backends {
		had[old.Stat[i]] = b.IP
	}
	var added []uint8
	for i, b := range t.Backends {
		if ip, ok := had[stat[i]]; !ok || ip != b.IP {
			added = append(added, stat[i])
		}
	}
	if len(added) > 0 {
		tr, err := d.ensureCounterBlock(bpf.DirectorMapBackendTraffic, d.Maps.BackendTraffic, statsID)
		if err != nil {
			return err
		}
		defer tr.Close()
		for _, s := range added {
			if err := tr.Put(uint32(s), make([]abi.Traffic, possibleCPUs())); err != nil {
				return fmt.Errorf("zeroing the counters of stats id %d: %w", statsID, err)
			}
		}
	}
	if t.QUIC.On() && !old.Table.QUIC.On() && d.Maps.QuicStats != nil {
		q, err := d.ensureCounterBlock(bpf.DirectorMapQuicStats, d.Maps.QuicStats, statsID)
		if err != nil {
			return err
		}
		q.Close()
	}
	return nil
}

// freshQUICCounters gives a table new to its stats id fresh QUIC counters
// if it routes by QUIC-LB, and otherwise takes away those an earlier table
// left there (it would count on from them if it turned routing on).
func (d *Director) freshQUICCounters(statsID int, t *table.Table) error {
	switch {
	case d.Maps.QuicStats == nil:
		return nil
	case t.QUIC.On():
		return d.newCounterBlock(bpf.DirectorMapQuicStats, d.Maps.QuicStats, statsID)
	}
	if err := d.Maps.QuicStats.Delete(uint32(statsID)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("removing the QUIC counters of stats id %d: %w", statsID, err)
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
		tr, err := d.ensureCounterBlock(bpf.DirectorMapBackendTraffic, d.Maps.BackendTraffic, lt.StatsID)
		if err != nil {
			return err
		}
		tr.Close()
		if !lt.Table.QUIC.On() || d.Maps.QuicStats == nil {
			return nil
		}
		q, err := d.ensureCounterBlock(bpf.DirectorMapQuicStats, d.Maps.QuicStats, lt.StatsID)
		if err != nil {
			return err
		}
		q.Close()
		return nil
	})
}
