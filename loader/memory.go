package loader

import (
	"fmt"
	"reflect"
	"sort"

	"github.com/cilium/ebpf"
)

// MapMemory is what the director's maps hold in the kernel, as the kernel
// accounts it: each map's memlock (what its fdinfo says and bpftool map
// show prints; from Linux 6.4 what the map has allocated, before that what
// its type and size reserve). A map of maps counts its inner maps with it.
type MapMemory struct {
	Bytes uint64   `json:"bytes"` // every map's
	Maps  []MapUse `json:"maps"`  // by map, the largest first
}

// MapUse is one pinned map's share of MapMemory.
type MapUse struct {
	Name  string `json:"name"`
	Bytes uint64 `json:"bytes"`           // its own and its inner maps'
	Inner int    `json:"inner,omitempty"` // inner maps it holds
}

// Of returns the use of the map named name (zero if none).
func (m MapMemory) Of(name string) MapUse {
	for _, u := range m.Maps {
		if u.Name == name {
			return u
		}
	}
	return MapUse{Name: name}
}

// MapMemory reads what the director's pinned maps hold: every map of
// d.Maps, found by its ebpf tag, so that a map added to the program is
// counted without a change here.
func (d *Director) MapMemory() (MapMemory, error) {
	var out MapMemory
	err := eachMap(reflect.ValueOf(&d.Maps).Elem(), func(name string, m *ebpf.Map) error {
		u, err := mapUse(name, m)
		if err != nil {
			return err
		}
		out.Bytes += u.Bytes
		out.Maps = append(out.Maps, u)
		return nil
	})
	sort.SliceStable(out.Maps, func(i, j int) bool { return out.Maps[i].Bytes > out.Maps[j].Bytes })
	return out, err
}

// eachMap calls f with every *ebpf.Map field of the struct v (embedded
// structs included) that has an ebpf tag, and is open.
func eachMap(v reflect.Value, f func(name string, m *ebpf.Map) error) error {
	for i := 0; i < v.NumField(); i++ {
		field, sf := v.Field(i), v.Type().Field(i)
		if sf.Anonymous && field.Kind() == reflect.Struct {
			if err := eachMap(field, f); err != nil {
				return err
			}
			continue
		}
		name := sf.Tag.Get("ebpf")
		m, ok := field.Interface().(*ebpf.Map)
		if name == "" || !ok || m == nil {
			continue
		}
		if err := f(name, m); err != nil {
			return err
		}
	}
	return nil
}

// mapUse is m's memlock, with its inner maps' when it is a map of maps.
func mapUse(name string, m *ebpf.Map) (MapUse, error) {
	u := MapUse{Name: name}
	b, err := memlock(m)
	if err != nil {
		return u, fmt.Errorf("map %s: %w", name, err)
	}
	u.Bytes = b
	if t := m.Type(); t != ebpf.ArrayOfMaps && t != ebpf.HashOfMaps {
		return u, nil
	}
	var keys []uint32
	if m.Type() == ebpf.ArrayOfMaps {
		// Looked up key by key: an empty slot is not an entry, which the
		// iterator would stop at.
		for k := uint32(0); k < m.MaxEntries(); k++ {
			keys = append(keys, k)
		}
	} else {
		var k, id uint32
		for it := m.Iterate(); it.Next(&k, &id); {
			keys = append(keys, k)
		}
	}
	seen := map[ebpf.MapID]bool{}
	for _, k := range keys {
		var id ebpf.MapID
		if err := m.Lookup(k, &id); err != nil || id == 0 || seen[id] {
			continue // empty, or emptied since it was listed
		}
		seen[id] = true
		inner, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue // replaced since it was read: an apply under way
		}
		b, err := memlock(inner)
		inner.Close()
		if err != nil {
			return u, fmt.Errorf("map %s[%d]: %w", name, k, err)
		}
		u.Bytes += b
		u.Inner++
	}
	return u, nil
}

func memlock(m *ebpf.Map) (uint64, error) {
	info, err := m.Info()
	if err != nil {
		return 0, err
	}
	// 0 reads as absent, but every kernel this runs on (4.10 on) has the
	// field: 0 is a map that holds nothing yet (an empty trie, a hash
	// without preallocation).
	b, _ := info.Memlock()
	return b, nil
}
