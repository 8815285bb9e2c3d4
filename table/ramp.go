package table

import (
	"fmt"
	"slices"
)

// A Ramp is the way to lower one backend's weight without putting a row at
// risk: intermediate weights, each step of which has no row whose primary
// is in neither new hop. Lowering a weight moves rows off the backend; a
// row where it falls behind two others at once loses it from both hops,
// and a smaller step leaves fewer such rows.
type Ramp struct {
	Table   string `json:"table"`
	Backend string `json:"backend"`
	From    uint16 `json:"from"`
	// Steps are the weights to apply in turn, the last being the target.
	Steps []uint16 `json:"steps"`
}

// maxRampSteps bounds a ramp: past it a ramp is not worth proposing.
const maxRampSteps = 1000

// FindRamp proposes a ramp for going from live, a table as it is served,
// to next, when the only difference between them is one backend's weight,
// lowered. It returns nil, with no error, when the change is something
// else; and an error when the change is one but no ramp of whole weights
// has steps without rows at risk.
func FindRamp(live *Table, next *TableConfig) (*Ramp, error) {
	return findRamp(live, next, -1)
}

func findRamp(live *Table, next *TableConfig, index int) (*Ramp, error) {
	if len(live.Backends) != len(next.Backends) {
		return nil, nil
	}
	k := -1
	for i, b := range next.Backends {
		o := live.Backends[i]
		if o.IP != b.IP || o.State != b.State || o.Healthy != b.Healthy || o.Domain != b.Domain {
			return nil, nil
		}
		if o.W() != b.W() {
			if k >= 0 || b.W() > o.W() {
				return nil, nil
			}
			k = i
		}
	}
	if k < 0 {
		return nil, nil
	}
	from, to := live.Backends[k].W(), next.Backends[k].W()
	base := *next
	base.Backends = slices.Clone(next.Backends)
	base.Backends[k].Weight = live.Backends[k].Weight
	b, err := NewBuilder(&base)
	if err != nil {
		return nil, err
	}
	if t := b.Table(); !slices.Equal(t.Rows, live.Rows) {
		return nil, nil // the live table is not this config at the old weight
	}
	r := &Ramp{Table: DisplayName(next.Name, index), Backend: next.Backends[k].IP.String(), From: from}
	steps, err := rampSteps(b, k, from, to)
	if err != nil {
		return nil, fmt.Errorf("%s %s: weight %d -> %d: %w", r.Table, r.Backend, from, to, err)
	}
	// Every step checked by building it, whatever the rule that chose it.
	rows := live.Rows
	for _, w := range steps {
		if err := b.SetWeight(k, w); err != nil {
			return nil, err
		}
		next := b.Table().Rows
		if n := atRisk(rows, next); n != 0 {
			return nil, fmt.Errorf("%s %s: weight %d -> %d: no ramp found (the step to %d still puts %d rows at risk)", r.Table, r.Backend, from, to, w, n)
		}
		rows = next
	}
	r.Steps = steps
	return r, nil
}

// rampSteps chooses the weights for lowering backend k from from to to.
// A row where k is primary at from is at risk in a step that takes k from
// ahead of the row's best other backend A to behind its second B at once;
// it is safe when some step's weight lies where k is between them. Each
// such row gives an interval of weights, and the fewest weights that meet
// every interval are found greedily (the interval stabbing problem). Rows
// where k is not primary cannot be put at risk by lowering it.
func rampSteps(b *Builder, k int, from, to uint16) ([]uint16, error) {
	kk := int32(k)
	type interval struct{ lo, hi uint16 } // k is second for weights in [lo, hi]
	var need []interval
	for r := range b.ranks {
		if b.ranks[r].i0 != kk {
			continue
		}
		st := b.states[r]
		hk := b.words[k].score(st)
		// The row's two best other backends.
		sa, sb, ia, ib := ^uint64(0), ^uint64(0), int32(none), int32(none)
		for i := range b.cfg.Backends {
			if i == k || b.flags[i]&flagActive == 0 {
				continue
			}
			s := b.key(int32(i), b.words[i].score(st))
			if b.before(s, int32(i), sa, ia) {
				sb, ib, sa, ia = sa, ia, s, int32(i)
			} else if b.before(s, int32(i), sb, ib) {
				sb, ib = s, int32(i)
			}
		}
		if ib == none {
			continue // two backends: k is second whenever it is not first
		}
		// loses(w, s, i): at weight w, k no longer ranks ahead of i.
		loses := func(w uint16, s uint64, i int32) bool {
			return !b.before(keyFor(expScore(hk), recip(w)), kk, s, i)
		}
		// The highest weight at which k loses to x, 0 if none in [1, from].
		last := func(s uint64, i int32) uint16 {
			lo, hi := uint16(0), from // loses(hi) false (k primary at from)
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				if loses(mid, s, i) {
					lo = mid
				} else {
					hi = mid
				}
			}
			return lo
		}
		ca, cb := last(sa, ia), last(sb, ib)
		if cb < to {
			continue // k is still ahead of B at the target: never at risk
		}
		if ca <= cb {
			return nil, fmt.Errorf("no ramp of whole weights: in row %#04x the backend passes two others between weights %d and %d", r, cb, cb+1)
		}
		need = append(need, interval{cb + 1, ca})
	}
	slices.SortFunc(need, func(x, y interval) int { return int(y.lo) - int(x.lo) })
	var steps []uint16
	for _, iv := range need {
		if n := len(steps); n > 0 && steps[n-1] <= iv.hi {
			continue // met by the last weight chosen
		}
		steps = append(steps, iv.lo)
	}
	if len(steps) > maxRampSteps {
		return nil, fmt.Errorf("a ramp needs %d steps, more than %d", len(steps), maxRampSteps)
	}
	if n := len(steps); n == 0 || steps[n-1] != to {
		steps = append(steps, to)
	}
	return steps, nil
}

// Ramps proposes, for each table of next whose only change from the live
// table of its name (or position) is one lowered weight putting rows at
// risk, a ramp; and says why where there is none.
func Ramps(live []*Table, next *Config) (ramps []Ramp, problems []string) {
	byName := allNamed(live) && allNamedConfigs(next.Tables)
	for i := range next.Tables {
		tc := &next.Tables[i]
		var lt *Table
		for j, t := range live {
			if (byName && t.Name == tc.Name) || (!byName && j == i) {
				lt = t
			}
		}
		if lt == nil {
			continue
		}
		r, err := findRamp(lt, tc, i)
		if err != nil {
			problems = append(problems, err.Error())
		} else if r != nil && len(r.Steps) > 1 {
			ramps = append(ramps, *r)
		}
	}
	return ramps, problems
}

func allNamedConfigs(ts []TableConfig) bool {
	for _, t := range ts {
		if t.Name == "" {
			return false
		}
	}
	return true
}

// atRisk counts the rows whose old primary is in neither new hop.
func atRisk(old, new []Row) int {
	n := 0
	for r := range old {
		p := old[r].Primary
		if new[r].Primary != p && new[r].Secondary != p {
			n++
		}
	}
	return n
}

// clone is an independent copy of the builder.
func (b *Builder) clone() *Builder {
	c := *b
	c.cfg.Backends = slices.Clone(b.cfg.Backends)
	c.cfg.Binds = slices.Clone(b.cfg.Binds)
	c.words, c.flags, c.wts, c.recips = slices.Clone(b.words), slices.Clone(b.flags), slices.Clone(b.wts), slices.Clone(b.recips)
	c.v4idx, c.v4w, c.v6idx = slices.Clone(b.v4idx), slices.Clone(b.v4w), slices.Clone(b.v6idx)
	c.chunkMax, c.dom = slices.Clone(b.chunkMax), slices.Clone(b.dom)
	c.states, c.ranks = b.states, slices.Clone(b.ranks) // states never change
	return &c
}
