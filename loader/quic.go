package loader

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

// writeQUIC writes t's QUIC-LB configs for slot, which no packet reads
// while it is written, and deletes the slot's entries of configs t has not
// (a table that had them before), so that quic_ids and quic_keys hold what
// the tables live use.
func (d *Director) writeQUIC(slot int, t *table.Table, stat []uint8) error {
	imgs, err := mapimage.EncodeQUIC(t, stat)
	if err != nil {
		return err
	}
	var ids, keys [abi.QUICConfigs]bool
	for _, img := range imgs {
		k := abi.QUICKey(slot, img.Config)
		if img.Key != nil {
			if err := d.Maps.QuicKeys.Put(k, img.Key); err != nil {
				return fmt.Errorf("writing the key of QUIC config %d: %w", img.Config, err)
			}
			keys[img.Config] = true
		}
		if err := d.Maps.QuicIds.Put(k, img.IDs); err != nil {
			return fmt.Errorf("writing the server IDs of QUIC config %d: %w", img.Config, err)
		}
		ids[img.Config] = true
	}
	for c := uint8(0); c < table.MaxQUICConfigID+1; c++ {
		k := abi.QUICKey(slot, c)
		if !ids[c] {
			if err := d.Maps.QuicIds.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("deleting QUIC config %d: %w", c, err)
			}
		}
		if !keys[c] {
			if err := d.Maps.QuicKeys.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("deleting the key of QUIC config %d: %w", c, err)
			}
		}
	}
	return nil
}

// readQUIC reads the QUIC-LB configs of slot that its table's
// quic_configs names.
func (d *Director) readQUIC(slot int, configs uint8) ([]mapimage.QUICImage, error) {
	var imgs []mapimage.QUICImage
	for c := uint8(0); c < table.MaxQUICConfigID+1; c++ {
		if configs&(1<<c) == 0 {
			continue
		}
		k := abi.QUICKey(slot, c)
		img := mapimage.QUICImage{Config: c, IDs: new(abi.QUICTable)}
		if err := d.Maps.QuicIds.Lookup(k, img.IDs); err != nil {
			return nil, fmt.Errorf("QUIC config %d: %w", c, err)
		}
		if img.IDs.Enc != 0 {
			img.Key = new(abi.AESKey)
			if err := d.Maps.QuicKeys.Lookup(k, img.Key); err != nil {
				return nil, fmt.Errorf("QUIC config %d's key: %w", c, err)
			}
		}
		imgs = append(imgs, img)
	}
	if configs>>(table.MaxQUICConfigID+1) != 0 {
		return nil, fmt.Errorf("corrupt table: QUIC configs %#x", configs)
	}
	return imgs, nil
}

// sameQUIC reports whether a and b hold the same bytes.
func sameQUIC(a, b []mapimage.QUICImage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Config != b[i].Config || !bytes.Equal(rawBytes(a[i].IDs), rawBytes(b[i].IDs)) ||
			(a[i].Key == nil) != (b[i].Key == nil) || (a[i].Key != nil && !bytes.Equal(rawBytes(a[i].Key), rawBytes(b[i].Key))) {
			return false
		}
	}
	return true
}

// DefaultQUICWindow is how long a plan that removes a QUIC-LB config
// watches the config's counters (Director.QUICWindow) when none is set.
const DefaultQUICWindow = 5 * time.Second

// quicUse measures what each live config that p removes carries: its
// packets (every one whose ID has its rotation bits, whatever became of
// it) counted over d.QUICWindow, which the plan waits for. Nothing is
// measured, and nothing waited for, where p removes no config.
func (d *Director) quicUse(live State, p *Proposal) (map[table.QUICUseKey]table.QUICUse, error) {
	keys := table.QUICRemovals(live.Tables, p.Tables)
	if len(keys) == 0 || len(live.statsIDs) != len(live.Tables) {
		return nil, nil
	}
	window := d.QUICWindow
	if window <= 0 {
		window = DefaultQUICWindow
	}
	read := func() ([]uint64, error) {
		out := make([]uint64, len(keys))
		for i, k := range keys {
			n, err := d.quicPackets(live.statsIDs[k.Table], k.Config)
			if err != nil {
				return nil, fmt.Errorf("QUIC config %d's counters: %w", k.Config, err)
			}
			out[i] = n
		}
		return out, nil
	}
	before, err := read()
	if err != nil {
		return nil, err
	}
	time.Sleep(window)
	after, err := read()
	if err != nil {
		return nil, err
	}
	use := map[table.QUICUseKey]table.QUICUse{}
	for i, k := range keys {
		use[k] = table.QUICUse{Packets: after[i] - before[i], Total: after[i], Window: window}
	}
	return use, nil
}

// quicPackets is how many packets of the table with counter block
// statsID carried IDs of config rotation c: the sum of its QUIC counters,
// over every CPU (those routed by ICMP are among the routed).
func (d *Director) quicPackets(statsID int, c uint8) (uint64, error) {
	if d.Maps.QuicStats == nil {
		return 0, errors.New("the pinned maps have no QUIC counters")
	}
	block, err := counterBlock(d.Maps.QuicStats, statsID)
	if err != nil || block == nil {
		return 0, err
	}
	defer block.Close()
	var per []abi.QUICStats
	if err := block.Lookup(uint32(c), &per); err != nil {
		return 0, err
	}
	var n uint64
	for _, p := range per {
		for i, v := range p.C {
			if abi.CQUICRouted+i != abi.CQUICICMPRouted {
				n += v
			}
		}
	}
	return n, nil
}

// statsIDs are live's counter blocks, in order.
func statsIDs(live []mapimage.LiveTable) []int {
	out := make([]int, len(live))
	for i, lt := range live {
		out[i] = lt.StatsID
	}
	return out
}

// sweepQUIC deletes the QUIC configs and keys of every slot not in inUse:
// left by tables that no generation references any more, so that the maps
// hold the configs of the tables packets can reach (the live ones and the
// previous generation's), not of every table ever written.
func (d *Director) sweepQUIC(inUse map[int]bool) error {
	for _, m := range []*ebpf.Map{d.Maps.QuicIds, d.Maps.QuicKeys} {
		var stale []uint32
		var k uint32
		var err error
		for err = m.NextKey(nil, &k); err == nil; err = m.NextKey(k, &k) {
			if !inUse[int(k/abi.QUICConfigs)] {
				stale = append(stale, k)
			}
		}
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("listing the QUIC configs: %w", err)
		}
		for _, k := range stale {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("deleting a QUIC config of a retired table slot: %w", err)
			}
		}
	}
	return nil
}
