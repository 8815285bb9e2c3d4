package loader

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf"
	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

// Live reads every live table back from the kernel maps, in index order.
// What it returns is what packets are steered with. It takes no lock: it
// reads the generation counter before and after, and reads again if an
// apply committed meanwhile (an apply in progress writes only the other
// generation's binds and slots neither generation uses).
func (d *Director) Live() ([]mapimage.LiveTable, error) {
	for try := 0; ; try++ {
		before, err := d.generation()
		if err != nil {
			return nil, err
		}
		out, err := d.liveAt(before)
		after, gerr := d.generation()
		if gerr != nil {
			return nil, gerr
		}
		if after == before {
			return out, err
		}
		if try == 100 {
			return nil, errors.New("reading live tables: applies keep committing under the reader")
		}
	}
}

// liveAt reads the tables generation gen registers.
func (d *Director) liveAt(gen uint32) ([]mapimage.LiveTable, error) {
	slots, err := d.registered(gen % abi.BindGens)
	if err != nil {
		return nil, err
	}
	// Read at once. Not fingerprinted (SHA-256 over 2 MB of hops each):
	// a table a config's digest checks out against takes the one its
	// registry records (table.Table.BuiltFrom), and the rest are
	// fingerprinted when asked.
	out := make([]mapimage.LiveTable, len(slots))
	err = concurrently(len(slots), func(i int) error {
		lt, err := d.readSlotCached(slots[i])
		if err != nil {
			return fmt.Errorf("reading table slot %d: %w", slots[i], err)
		}
		out[i] = *lt
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// generation returns the bind generation counter: every commit adds one,
// and its parity (what the program reads) picks the live binds.
func (d *Director) generation() (uint32, error) {
	var c abi.Config
	if err := d.Maps.Config.Lookup(uint32(0), &c); err != nil {
		return 0, err
	}
	return c.BindGen, nil
}

// trie opens a generation's bind trie; the caller closes it.
func (d *Director) trie(gen uint32) (*ebpf.Map, error) { return innerMap(d.Maps.Binds, gen) }

func innerMap(outer *ebpf.Map, key uint32) (*ebpf.Map, error) {
	var id ebpf.MapID
	if err := outer.Lookup(key, &id); err != nil {
		return nil, fmt.Errorf("reading %s[%d]: %w", outer, key, err)
	}
	return ebpf.NewMapFromID(id)
}

// registered lists the table slots a bind generation's trie registers.
func (d *Director) registered(gen uint32) ([]int, error) {
	trie, err := d.trie(gen)
	if err != nil {
		return nil, err
	}
	defer trie.Close()
	var slots []int
	var k abi.BindKey
	var v abi.BindVal
	it := trie.Iterate()
	for it.Next(&k, &v) {
		if k.Kind == abi.BindTable {
			slots = append(slots, int(v.Id))
		}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	sort.Ints(slots)
	return slots, nil
}

// readSlot reads and decodes the table in slot.
func (d *Director) readSlot(slot int) (*mapimage.LiveTable, error) {
	return d.readSlotRaw(slot, false)
}

// readSlotCached is readSlot, but for bytes (and a registry digest) equal
// to those it last decoded in slot: that decoded table, as it was.
func (d *Director) readSlotCached(slot int) (*mapimage.LiveTable, error) {
	return d.readSlotRaw(slot, true)
}

func (d *Director) readSlotRaw(slot int, cached bool) (*mapimage.LiveTable, error) {
	var id ebpf.MapID
	if err := d.Maps.Tables.Lookup(uint32(slot), &id); err != nil {
		return nil, err
	}
	inner, err := ebpf.NewMapFromID(id)
	if err != nil {
		return nil, err
	}
	defer inner.Close()
	dt := new(abi.Table)
	if err := inner.Lookup(uint32(0), dt); err != nil {
		return nil, err
	}
	qi, err := d.readQUIC(slot, dt.QuicConfigs)
	if err != nil {
		return nil, err
	}
	dh, err := d.readHistory(slot)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	// The registry's digest is its writer's word, which a reader checks
	// against the rows before taking the table for a config's
	// (table.Table.BuiltFrom).
	var reg abi.Registry
	if err := d.Maps.Registry.Lookup(uint32(slot), &reg); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if cached {
		d.cache.knownMu.Lock()
		c, ok := d.cache.read[slot]
		d.cache.knownMu.Unlock()
		if ok && c.digest == reg.Digest && bytes.Equal(rawBytes(c.raw), rawBytes(dt)) && sameQUIC(c.quic, qi) && (c.hist == nil) == (dh == nil) &&
			(dh == nil || bytes.Equal(rawBytes(c.hist), rawBytes(dh))) {
			lt := c.lt
			return &lt, nil
		}
	}
	lt, err := mapimage.DecodeTable(dt)
	if err != nil {
		return nil, err
	}
	if err := mapimage.DecodeQUIC(dt.QuicConfigs, qi, lt); err != nil {
		return nil, err
	}
	if lt.History, err = mapimage.DecodeHistory(dh, dt, lt); err != nil {
		return nil, err
	}
	lt.Slot = slot
	lt.Table.Digest = reg.Digest
	if reg.Fingerprint != ([32]byte{}) {
		lt.Table.Claimed = hex.EncodeToString(reg.Fingerprint[:])
	}
	lt.Table = d.canonical(slot, lt.Table)
	d.cache.knownMu.Lock()
	if d.cache.read == nil {
		d.cache.read = map[int]readSlotCache{}
	}
	d.cache.read[slot] = readSlotCache{raw: dt, quic: qi, hist: dh, digest: reg.Digest, lt: *lt}
	d.cache.knownMu.Unlock()
	return lt, nil
}

// canonical is t, or the table known to be in slot when t's content
// equals it.
func (d *Director) canonical(slot int, t *table.Table) *table.Table {
	d.cache.knownMu.Lock()
	defer d.cache.knownMu.Unlock()
	if k := d.cache.known[slot]; k != nil && sameContent(k, t) && k.Digest == t.Digest {
		return k
	}
	d.remember(slot, t)
	return t
}

// remember records t as slot's content; the caller holds knownMu.
func (d *Director) remember(slot int, t *table.Table) {
	if d.cache.known == nil {
		d.cache.known = map[int]*table.Table{}
	}
	d.cache.known[slot] = t
}

// sameContent reports whether two tables hold the same thing in the
// kernel: name, key, balance factor, QUIC routing, binds, backends
// (server IDs included) and rows. (NoGoodRows
// follows from the rows and backends.)
func sameContent(a, b *table.Table) bool {
	if a.Name != b.Name || a.Balance != b.Balance || a.QUIC != b.QUIC || a.History != b.History || a.HashKey != b.HashKey || !slices.Equal(a.Binds, b.Binds) || !slices.Equal(a.Rows, b.Rows) ||
		len(a.Backends) != len(b.Backends) {
		return false
	}
	for i := range a.Backends {
		x, y := a.Backends[i], b.Backends[i]
		if x.IP != y.IP || x.State != y.State || x.Healthy != y.Healthy || x.W() != y.W() || x.Domain != y.Domain ||
			x.ServerID != y.ServerID || x.MoreServerIDs != y.MoreServerIDs {
			return false
		}
	}
	return true
}

// ApplyResult is what an apply did.
type ApplyResult struct {
	Tables   []mapimage.LiveTable
	Duration time.Duration
}

// change is what an apply makes live.
type change struct {
	Tables []*table.Table
	// Config, when not nil, replaces the director config in the same
	// commit; its gateway MAC must be resolved (ResolveGateway).
	Config *table.DirectorConfig
}

// State is what is live: the tables, and the director config (nil until
// one is written), with the tables' histories (nil for none) and the
// time they were read at, which a change made on them is judged at.
type State struct {
	Tables    []*table.Table
	Config    *table.DirectorConfig
	Histories []*table.History
	Now       time.Time
	// Restored are, when no table is live, the tables saved before the
	// host restarted (StateDir) that a change's tables continue.
	Restored map[string]table.Restored
	// QUICUse is what the live tables' QUIC-LB configs that a change
	// removes carried lately (quicUse), measured when the change is
	// planned; nil until then.
	QUICUse map[table.QUICUseKey]table.QUICUse

	statsIDs []int // each live table's counter block, for QUICUse
}

// base is what a change to tables is judged against.
func (s State) base() table.Base {
	now := s.Now
	if now.IsZero() {
		now = time.Now()
	}
	return table.Base{Tables: s.Tables, Histories: s.Histories, Now: now, Restored: s.Restored, QUICUse: s.QUICUse}
}

// Histories returns the histories of a live set.
func Histories(live []mapimage.LiveTable) []*table.History {
	out := make([]*table.History, len(live))
	for i := range live {
		out[i] = live[i].History
	}
	return out
}

// apply makes tables the live set, keeping the director config; see
// applyChange.
func (d *Director) apply(tables []*table.Table, check func(live []*table.Table) error) (*ApplyResult, error) {
	return d.applyChange(change{Tables: tables}, func(s State) ([]*table.History, error) {
		if check == nil {
			return nil, nil
		}
		return nil, check(s.Tables)
	})
}

// applyChange makes a change live. Every new or changed table is written,
// in one map update, into a slot that neither bind generation references
// (so no packet can be reading it); the binds pointing at the new slots are
// written into the inactive generation; then one write of the config
// entry flips the generation, and with it sets the new director config:
// the commit point. Packets see all the old tables and settings or all the
// new ones. If the process dies at any point before the commit, the
// previous state keeps serving; after it, the new one does.
//
// Tables keep their counters across applies: a table is matched to a live
// one by name when both have one, otherwise by position, and a backend by
// address.
//
// check, if not nil, runs under the apply lock with the live state and
// can refuse the apply (plans use it to insist on the state they were
// reviewed against). It gives the tables' histories after the change,
// which its plan worked out (table.Plan.Histories); nil: they are worked
// out here, the same way.
//
// Each table's history goes into its slot with it (writeSlots), so that
// the commit makes both live at once; a table whose history changed and
// rows did not is written again too.
func (d *Director) applyChange(ch change, check func(live State) ([]*table.History, error)) (*ApplyResult, error) {
	tables := ch.Tables
	start := time.Now()
	if err := mapimage.CheckDatapath(tables); err != nil {
		return nil, err
	}
	unlock, err := lockDir(d.Dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if ch.Config != nil {
		if _, err := configEntry(ch.Config, 0); err != nil {
			return nil, fmt.Errorf("director config: %w", err)
		}
	}
	live, hists, err := d.checkedLive(tables, check)
	if err != nil {
		return nil, err
	}
	serving := ch.Config
	if serving == nil {
		if serving, err = d.LiveConfig(); err != nil {
			return nil, fmt.Errorf("reading the live director config: %w", err)
		}
	}
	if err := checkSources(tables, serving); err != nil {
		return nil, err
	}
	gen, err := d.generation()
	if err != nil {
		return nil, err
	}
	previous, err := d.registered((gen + 1) % abi.BindGens) // the inactive generation
	if err != nil {
		return nil, err
	}
	plans, err := mapimage.Place(live, previous, tables, hists)
	if err != nil {
		return nil, err
	}
	if err := d.writeSlots(tables, hists, plans); err != nil {
		return nil, err
	}
	// The commit: the new binds for all tables, in one generation flip.
	slots := make([]int, len(plans))
	for i, p := range plans {
		slots[i] = p.Slot
	}
	if err := d.swapBinds(tables, slots, ch.Config); err != nil {
		return nil, err
	}
	now, err := d.readBack(gen+1, plans)
	if err != nil {
		return nil, err
	}
	// The QUIC configs of slots neither generation references now (the
	// one just committed, and the one before it, which packets in flight
	// may still read): tables no packet can reach any more. Left, they
	// would only hold memory; the apply is made either way.
	inUse := map[int]bool{}
	for _, lt := range live {
		inUse[lt.Slot] = true
	}
	for _, p := range plans {
		inUse[p.Slot] = true
	}
	if err := d.sweepQUIC(inUse); err != nil {
		d.StateWarnings = append(d.StateWarnings, err.Error())
	}
	written := map[int]bool{}
	for i, p := range plans {
		written[i] = p.Write
	}
	// Live now: what is saved for a restart of the host follows; a
	// failure to save leaves the apply made, and says so.
	if err := d.saveTables(now, written); err != nil {
		d.StateWarnings = append(d.StateWarnings, fmt.Sprintf("%s: the tables applied are not saved for a restart: %v", d.stateDir(), err))
	}
	return &ApplyResult{Tables: now, Duration: time.Since(start)}, nil
}

// readBack is the live set once generation gen is committed: the slots
// its binds register must be the plans' own, each slot written read back
// from the kernel, and the others as they were read before the commit
// (under the lock, which every writer takes: not written since). Reading
// all 32 tables of 256 backends again was most of an apply's time.
func (d *Director) readBack(gen uint32, plans []mapimage.Placement) ([]mapimage.LiveTable, error) {
	reg, err := d.registered(gen % abi.BindGens)
	if err != nil {
		return nil, fmt.Errorf("reading back the binds: %w", err)
	}
	want := make([]int, len(plans))
	for i, p := range plans {
		want[i] = p.Slot
	}
	slices.Sort(want)
	if !slices.Equal(reg, want) {
		return nil, fmt.Errorf("the binds read back register table slots %v, not the %v written", reg, want)
	}
	out := make([]mapimage.LiveTable, len(plans))
	err = concurrently(len(plans), func(i int) error {
		p := plans[i]
		if !p.Write {
			out[i] = *p.Old
			return nil
		}
		lt, err := d.readSlot(p.Slot)
		if err != nil {
			return fmt.Errorf("reading back tables[%d] from slot %d: %w", i, p.Slot, err)
		}
		table.Fingerprint(lt.Table)
		out[i] = *lt
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkedLive reads the live state and, with check, has it judge it;
// it gives the tables' histories after the change (check's, or worked
// out from the live state).
func (d *Director) checkedLive(tables []*table.Table, check func(live State) ([]*table.History, error)) ([]mapimage.LiveTable, []*table.History, error) {
	live, err := d.Live()
	if err != nil {
		return nil, nil, fmt.Errorf("reading live tables: %w", err)
	}
	st := State{Tables: Tables(live), Histories: Histories(live), Now: d.now(), statsIDs: statsIDs(live)}
	st.Restored = d.restoredFor(st.Tables, tables, st.Now)
	var hists []*table.History
	if check != nil {
		if st.Config, err = d.LiveConfig(); err != nil {
			return nil, nil, fmt.Errorf("reading the live director config: %w", err)
		}
		if hists, err = check(st); err != nil {
			return nil, nil, err
		}
	}
	if hists == nil {
		_, hists = table.CompareAt(st.base(), tables)
	}
	return live, hists, nil
}

// writeSlots writes the tables that plans put in new slots, which neither
// bind generation references, and gives the tables and backends new to
// their place zeroed counters.
func (d *Director) writeSlots(tables []*table.Table, hists []*table.History, plans []mapimage.Placement) error {
	// A slot used for the first time gets its map, and a table new to its
	// stats id its counters' (resetCounters); installing each waits for
	// an RCU grace period, so they are installed at once, to wait
	// together.
	var fresh []int
	for _, p := range plans {
		if p.Write {
			fresh = append(fresh, p.Slot)
		}
	}
	if err := concurrently(len(plans)+len(fresh), func(i int) error {
		if i < len(plans) {
			return d.resetCounters(plans[i].StatsID, plans[i].Old, tables[i], plans[i].Stat)
		}
		m, err := d.slotMap(fresh[i-len(plans)])
		if err == nil {
			m.Close()
		}
		return err
	}); err != nil {
		return err
	}
	for i, p := range plans {
		if !p.Write {
			continue
		}
		ghosts, err := mapimage.GhostsOf(tables[i], hists[i], p.Stat)
		if err != nil {
			return fmt.Errorf("tables[%d]: %w", i, err)
		}
		dt, err := mapimage.EncodeTable(tables[i], i, p.StatsID, p.Stat, ghosts)
		if err != nil {
			return fmt.Errorf("tables[%d]: %w", i, err)
		}
		if err := d.writeHistory(p.Slot, tables[i], hists[i], p.Stat, ghosts, dt); err != nil {
			return fmt.Errorf("tables[%d]: %w", i, err)
		}
		// Its QUIC configs first: the table's quic_configs sends packets
		// to them.
		if err := d.writeQUIC(p.Slot, tables[i], p.Stat); err != nil {
			return fmt.Errorf("tables[%d]: %w", i, err)
		}
		inner, err := d.slotMap(p.Slot)
		if err != nil {
			return err
		}
		// The slot is referenced by neither generation: no packet reads
		// it while it is written.
		err = inner.Put(uint32(0), dt)
		inner.Close()
		if err != nil {
			return fmt.Errorf("writing tables[%d]: %w", i, err)
		}
		// Its registry entry: the fingerprint, and the digest of the
		// config it was built from (zero for a GLB binary's table).
		var reg abi.Registry
		if fp, err := hex.DecodeString(table.Fingerprint(tables[i])); err == nil {
			copy(reg.Fingerprint[:], fp)
		}
		reg.Digest = tables[i].Digest
		if err := d.Maps.Registry.Put(uint32(p.Slot), &reg); err != nil {
			return fmt.Errorf("registry of tables[%d]: %w", i, err)
		}
		d.cache.knownMu.Lock()
		d.remember(p.Slot, tables[i])
		d.cache.knownMu.Unlock()
	}
	return nil
}

// Tables returns the tables of a live set.
func Tables(live []mapimage.LiveTable) []*table.Table {
	out := make([]*table.Table, len(live))
	for i := range live {
		out[i] = live[i].Table
	}
	return out
}

// slotMap returns the map holding a slot's table, creating it the first
// time the slot is used. Slots keep their maps: replacing an entry of an
// array of maps makes the kernel wait for an RCU grace period, which would
// make every apply take tens of milliseconds.
func (d *Director) slotMap(slot int) (*ebpf.Map, error) {
	var id ebpf.MapID
	err := d.Maps.Tables.Lookup(uint32(slot), &id)
	if err == nil {
		return ebpf.NewMapFromID(id)
	}
	if !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, err
	}
	inner, err := ebpf.NewMap(d.spec.Maps[bpf.DirectorMapTables].InnerMap)
	if err != nil {
		return nil, fmt.Errorf("creating a table map: %w", err)
	}
	if err := d.Maps.Tables.Put(uint32(slot), inner); err != nil {
		inner.Close()
		return nil, fmt.Errorf("installing a table map: %w", err)
	}
	return inner, nil
}
