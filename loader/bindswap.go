package loader

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/table"
	"github.com/director/director/table/bindmap"
)

// swapBinds builds the bind maps for tables (tables[i] in slots[i]) in the
// inactive generation and flips to it, writing config (when not nil) in
// the same update.
func (d *Director) swapBinds(tables []*table.Table, slots []int, config *table.DirectorConfig) error {
	gen, err := d.generation()
	if err != nil {
		return err
	}
	next := gen + 1
	inactive := next % abi.BindGens
	// Nothing reads the inactive generation: empty its trie, then fill it.
	trie, err := d.trie(inactive)
	if err != nil {
		return err
	}
	defer trie.Close()
	var stale []abi.BindKey
	var k abi.BindKey
	var v abi.BindVal
	it := trie.Iterate()
	for it.Next(&k, &v) {
		stale = append(stale, k)
	}
	if err := it.Err(); err != nil {
		return err
	}
	for i := range stale {
		if err := trie.Delete(&stale[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clearing old binds: %w", err)
		}
	}
	l := bindmap.Lay(tables, slots, !d.noSpelling)
	defer l.Release()
	for i := range l.Trie {
		if err := trie.Put(&l.Trie[i].Key, &l.Trie[i].Val); err != nil {
			return fmt.Errorf("writing bind entry: %w", err)
		}
	}
	if err := d.Maps.BindExact.Put(inactive, l.Exact); err != nil {
		return fmt.Errorf("writing the exact bind table: %w", err)
	}
	if d.Maps.BindGroups != nil {
		if err := d.Maps.BindGroups.Put(inactive, l.Groups); err != nil {
			return fmt.Errorf("writing the bind group table: %w", err)
		}
	}

	// The commit point. Without a new director config, the rest of the
	// entry is rewritten with the values it has, and only the aligned
	// generation word changes.
	c := new(abi.Config)
	if err := d.Maps.Config.Lookup(uint32(0), c); err != nil {
		return err
	}
	c.BindGen = next
	if config != nil {
		if c, err = configEntry(config, next); err != nil {
			return err
		}
	}
	if err := d.Maps.Config.Put(uint32(0), c); err != nil {
		return fmt.Errorf("switching to the new binds: %w", err)
	}
	return nil
}

// rawBytes is the memory of *p, for comparing kernel values byte for byte:
// one memequal over 160 KB rather than Go's == field by field (bpf2go's
// structs have blank padding fields, which == skips by walking the rest).
func rawBytes[T any](p *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p))
}
