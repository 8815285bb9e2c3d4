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

// readHistory reads slot's history map: nil where the slot has none, or
// one written empty (a table without history in a slot that had one).
func (d *Director) readHistory(slot int) (*abi.History, error) {
	var id ebpf.MapID
	err := d.Maps.History.Lookup(uint32(slot), &id)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	inner, err := ebpf.NewMapFromID(id)
	if err != nil {
		return nil, err
	}
	defer inner.Close()
	dh := new(abi.History)
	if err := inner.Lookup(uint32(0), dh); err != nil {
		return nil, err
	}
	if dh.Valid == 0 {
		return nil, nil
	}
	return dh, nil
}

// writeHistory writes t's history h into slot, which no packet reads
// (writeSlots), and sets dt.HistHops, the longest list packets carry. A
// slot that has no history map gets one only for a table with a history;
// one that has is written empty for a table without.
func (d *Director) writeHistory(slot int, t *table.Table, h *table.History, stat []uint8, ghosts []mapimage.Ghost, dt *abi.Table) error {
	var id ebpf.MapID
	err := d.Maps.History.Lookup(uint32(slot), &id)
	has := err == nil
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	if h.Empty() && !has {
		return nil
	}
	dh, err := mapimage.EncodeHistory(t, h, stat, ghosts)
	if err != nil {
		return err
	}
	if !h.Empty() {
		dt.HistHops = uint8(h.MaxHops)
	}
	var inner *ebpf.Map
	if has {
		inner, err = ebpf.NewMapFromID(id)
	} else {
		// Created once a slot, as the table maps are: installing an
		// inner map waits for an RCU grace period.
		inner, err = ebpf.NewMap(d.spec.Maps[bpf.DirectorMapHistory].InnerMap)
		if err == nil {
			if err = d.Maps.History.Put(uint32(slot), inner); err != nil {
				inner.Close()
				return fmt.Errorf("installing a history map: %w", err)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("history map: %w", err)
	}
	defer inner.Close()
	if err := inner.Put(uint32(0), dh); err != nil {
		return fmt.Errorf("writing the history: %w", err)
	}
	return nil
}
