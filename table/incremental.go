package table

import (
	"fmt"
	"slices"
)

// shift renumbers rank indices at or after k by delta, for an insertion or
// removal at position k of the backend list.
func (b *Builder) shift(k int32, delta int32) {
	b.parallel(func(lo, hi int) {
		for r := lo; r < hi; r++ {
			rk := &b.ranks[r]
			if rk.i0 >= k {
				rk.i0 += delta
			}
			if rk.i1 >= k {
				rk.i1 += delta
			}
			if rk.ig >= k {
				rk.ig += delta
			}
			if rk.id >= k {
				rk.id += delta
			}
		}
	})
}

// admit ranks backend k into every row: O(rows) scores.
func (b *Builder) admit(k int) {
	be := b.cfg.Backends[k]
	if be.State == StateInactive {
		return
	}
	good := be.Good()
	b.parallel(func(lo, hi int) {
		for r := lo; r < hi; r++ {
			b.insert(&b.ranks[r], b.key(int32(k), b.words[k].score(b.states[r])), int32(k), good)
		}
	})
}

// rerankWhere recomputes the rows where pick is true. Only rows where a
// changed backend was R[0], R[1] or G need it: about 3/n of the rows, each
// costing n scores, so O(rows) in all.
func (b *Builder) rerankWhere(pick func(*rank) bool) {
	b.parallel(func(lo, hi int) {
		out := b.scratch()
		for r := lo; r < hi; r++ {
			if pick(&b.ranks[r]) {
				b.rankRow(r, out)
			}
		}
	})
}

// rerankAll ranks every row again: after the keys changed kind (the
// ranked backends' weights became equal, or stopped being).
func (b *Builder) rerankAll() { b.rerankWhere(func(*rank) bool { return true }) }

// Insert adds a backend at position k of the backend list.
func (b *Builder) Insert(k int, be Backend) error {
	if k < 0 || k > len(b.cfg.Backends) {
		return fmt.Errorf("insert position %d out of range", k)
	}
	for _, o := range b.cfg.Backends {
		if o.IP.Unmap() == be.IP.Unmap() {
			return fmt.Errorf("backend %s already present", be.IP)
		}
	}
	b.cfg.Backends = append(b.cfg.Backends[:k], append([]Backend{be}, b.cfg.Backends[k:]...)...)
	b.words = slices.Insert(b.words, k, wordsFor(AddrBytes(be.IP)))
	b.flags = slices.Insert(b.flags, k, flagsOf(be))
	b.wts = slices.Insert(b.wts, k, be.W())
	b.numberDomains()
	rekeyed := b.reindex()
	b.shift(int32(k), 1)
	if rekeyed {
		b.rerankAll()
		return nil
	}
	b.admit(k)
	return nil
}

// Remove deletes the backend at position k.
func (b *Builder) Remove(k int) error {
	if k < 0 || k >= len(b.cfg.Backends) {
		return fmt.Errorf("remove position %d out of range", k)
	}
	rest := append(append([]Backend(nil), b.cfg.Backends[:k]...), b.cfg.Backends[k+1:]...)
	if err := checkBuildable(rest); err != nil {
		return err
	}
	wasActive := b.cfg.Backends[k].State != StateInactive
	b.cfg.Backends = rest
	b.words = slices.Delete(b.words, k, k+1)
	b.flags = slices.Delete(b.flags, k, k+1)
	b.wts = slices.Delete(b.wts, k, k+1)
	b.numberDomains()
	rekeyed := b.reindex()
	kk := int32(k)
	if wasActive {
		// Mark the rows that ranked k with a sentinel before renumbering.
		b.parallel(func(lo, hi int) {
			for r := lo; r < hi; r++ {
				rk := &b.ranks[r]
				if rk.has(kk) {
					rk.i0 = -2
				}
			}
		})
	}
	b.shift(kk+1, -1)
	if rekeyed {
		b.rerankAll()
	} else if wasActive {
		b.rerankWhere(func(rk *rank) bool { return rk.i0 == -2 })
	}
	return nil
}

// Set changes the state and health of the backend at position k.
func (b *Builder) Set(k int, state State, healthy bool) error {
	if k < 0 || k >= len(b.cfg.Backends) {
		return fmt.Errorf("position %d out of range", k)
	}
	old := b.cfg.Backends[k]
	nb := old
	nb.State, nb.Healthy = state, healthy
	all := append([]Backend(nil), b.cfg.Backends...)
	all[k] = nb
	if err := checkBuildable(all); err != nil {
		return err
	}
	b.cfg.Backends[k] = nb
	b.flags[k] = flagsOf(nb)
	if b.reindex() {
		b.rerankAll()
		return nil
	}
	kk := int32(k)
	switch {
	case old.State == StateInactive && nb.State != StateInactive:
		b.admit(k)
	case old.State != StateInactive && nb.State == StateInactive:
		b.rerankWhere(func(rk *rank) bool { return rk.has(kk) })
	case !old.Good() && nb.Good():
		b.parallel(func(lo, hi int) {
			for r := lo; r < hi; r++ {
				rk := &b.ranks[r]
				if s := b.key(kk, b.words[k].score(b.states[r])); b.before(s, kk, rk.sg, rk.ig) {
					rk.sg, rk.ig = s, kk
				}
			}
		})
	case old.Good() && !nb.Good():
		b.rerankWhere(func(rk *rank) bool { return rk.ig == kk })
	}
	return nil
}

// SetWeight changes the weight of the backend at position k (0 counts
// as 1).
func (b *Builder) SetWeight(k int, w uint16) error {
	if k < 0 || k >= len(b.cfg.Backends) {
		return fmt.Errorf("position %d out of range", k)
	}
	b.cfg.Backends[k].Weight = w
	b.wts[k] = b.cfg.Backends[k].W()
	if b.reindex() {
		b.rerankAll()
		return nil
	}
	if b.flags[k]&flagActive == 0 || !b.weighted {
		return nil // unranked, or every ranked weight is still one value
	}
	// Rows that rank k are ranked again; in the others k can only enter
	// (its key fell) or stay out (it rose).
	kk := int32(k)
	good := b.flags[k]&flagGood != 0
	b.parallel(func(lo, hi int) {
		out := b.scratch()
		for r := lo; r < hi; r++ {
			rk := &b.ranks[r]
			if rk.has(kk) {
				b.rankRow(r, out)
			} else {
				b.insert(rk, b.key(kk, b.words[k].score(b.states[r])), kk, good)
			}
		}
	})
	return nil
}

// Update moves the builder to a new config of the same table. A change of
// one backend (added, removed, or a new state or health) is applied
// incrementally; anything else rebuilds. It reports whether it was
// incremental. On error the builder is unchanged.
func (b *Builder) Update(tc *TableConfig) (incremental bool, err error) {
	if err := checkBuildable(tc.Backends); err != nil {
		return false, err
	}
	keepMeta := func() {
		b.cfg.Name, b.cfg.HashKey = tc.Name, tc.HashKey
		b.cfg.Balance = tc.Balance                      // applied by Table
		b.cfg.QUIC, b.cfg.History = tc.QUIC, tc.History // decide no row
		b.cfg.Binds = append([]Bind(nil), tc.Binds...)
	}
	if tc.Seed == b.cfg.Seed {
		if op := singleChange(b.cfg.Backends, tc.Backends); op != nil {
			if err := op(b); err != nil {
				return false, err
			}
			keepMeta()
			return true, nil
		}
	}
	nb, err := NewBuilder(tc)
	if err != nil {
		return false, err
	}
	*b = *nb
	return false, nil
}

// has reports whether backend i is one of the entries the rank keeps.
func (rk *rank) has(i int32) bool { return rk.i0 == i || rk.i1 == i || rk.ig == i || rk.id == i }

func sameBackend(a, b Backend) bool {
	return a.IP == b.IP && a.State == b.State && a.Healthy == b.Healthy && a.W() == b.W() && a.Domain == b.Domain &&
		a.ServerID == b.ServerID && a.MoreServerIDs == b.MoreServerIDs
}

// singleChange returns the incremental operation turning old into new, or
// nil when they differ by more than one backend.
func singleChange(old, new []Backend) func(*Builder) error {
	n := min(len(old), len(new))
	k := 0
	for k < n && sameBackend(old[k], new[k]) {
		k++
	}
	switch len(new) - len(old) {
	case 0:
		if k == n {
			return func(*Builder) error { return nil }
		}
		if old[k].IP != new[k].IP || old[k].Domain != new[k].Domain || !sameTail(old[k+1:], new[k+1:]) {
			return nil // a new domain renumbers them: rebuilt
		}
		be := new[k]
		return func(b *Builder) error {
			b.cfg.Backends[k].Healthchecks = be.Healthchecks
			b.cfg.Backends[k].ServerID, b.cfg.Backends[k].MoreServerIDs = be.ServerID, be.MoreServerIDs // decide no row
			if err := b.Set(k, be.State, be.Healthy); err != nil {
				return err
			}
			if be.W() != b.cfg.Backends[k].W() {
				return b.SetWeight(k, be.Weight)
			}
			return nil
		}
	case 1:
		if !sameTail(old[k:], new[k+1:]) {
			return nil
		}
		be := new[k]
		return func(b *Builder) error { return b.Insert(k, be) }
	case -1:
		if !sameTail(old[k+1:], new[k:]) {
			return nil
		}
		return func(b *Builder) error { return b.Remove(k) }
	}
	return nil
}

func sameTail(a, b []Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameBackend(a[i], b[i]) {
			return false
		}
	}
	return true
}
