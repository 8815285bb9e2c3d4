package table

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// A Ramp is the way to lower one backend's weight without putting a row at
// risk: intermediate weights, each step of which has no row whose primary
// is in neither new hop. Lowering a weight moves rows off the backend; a
// row where it falls behind two others at once loses it from both hops,
// and a smaller step leaves fewer such rows.
//
// A balance ramp is the way to add backends to a table with a balance
// factor: a row the factor swapped has its second choice as primary, and
// an added backend can push that out of the row's pair (balance.go). Its
// one step serves the table without the factor (the added backends
// inactive), which only swaps hops back; from there the edit itself puts
// no row at risk, since every old primary is then its row's first choice.
type Ramp struct {
	Table string `json:"table"`
	// Kind is RampWeight or RampBalance.
	Kind    string `json:"kind"`
	Backend string `json:"backend,omitempty"`
	From    uint16 `json:"from,omitempty"`
	// Steps are the weights to apply in turn, the last being the target.
	Steps []uint16 `json:"steps,omitempty"`
	// Added are a balance ramp's added backends.
	Added []string `json:"added,omitempty"`
}

// Ramp kinds.
const (
	RampWeight  = "weight"
	RampBalance = "balance"
)

// Apply makes tc, the edit's table, the ramp's first step.
func (r *Ramp) Apply(tc *TableConfig) {
	tc.Backends = slices.Clone(tc.Backends)
	switch r.Kind {
	case RampBalance:
		tc.Balance = 0
		for k := range tc.Backends {
			if slices.Contains(r.Added, tc.Backends[k].IP.String()) {
				tc.Backends[k].State = StateInactive
			}
		}
	default:
		for k := range tc.Backends {
			if tc.Backends[k].IP.String() == r.Backend {
				tc.Backends[k].Weight = r.Steps[0]
			}
		}
	}
}

// String says what the ramp does.
func (r *Ramp) String() string {
	if r.Kind == RampBalance {
		return fmt.Sprintf("%s: balance factor off while %s is added, then the edit", r.Table, strings.Join(r.Added, ", "))
	}
	return fmt.Sprintf("%s/%s: weight %d -> %d (%d more steps to %d)", r.Table, r.Backend, r.From, r.Steps[0], len(r.Steps)-1, r.Steps[len(r.Steps)-1])
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
	if live.Balance != 0 && next.Balance == live.Balance && len(next.Backends) > len(live.Backends) {
		return findBalanceRamp(live, next, index)
	}
	if len(live.Backends) != len(next.Backends) {
		return nil, nil
	}
	k := -1
	for i, b := range next.Backends {
		o := live.Backends[i]
		if o.IP != b.IP || o.State != b.State || o.Healthy != b.Healthy || o.Domain != b.Domain || o.ServerID != b.ServerID {
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
	r := &Ramp{Table: DisplayName(next.Name, index), Kind: RampWeight, Backend: next.Backends[k].IP.String(), From: from}
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

// findBalanceRamp proposes a balance ramp when next only adds backends to
// live, a table with the same balance factor, and doing so at once puts
// rows at risk.
func findBalanceRamp(live *Table, next *TableConfig, index int) (*Ramp, error) {
	was := map[netip.Addr]Backend{}
	for _, b := range live.Backends {
		was[b.IP] = b
	}
	r := &Ramp{Table: DisplayName(next.Name, index), Kind: RampBalance}
	kept := 0
	for _, b := range next.Backends {
		o, ok := was[b.IP]
		if !ok {
			r.Added = append(r.Added, b.IP.String())
			continue
		}
		if !sameBackend(o, b) {
			return nil, nil // more than additions
		}
		kept++
	}
	if kept != len(live.Backends) {
		return nil, nil
	}
	target, err := Build(next)
	if err != nil {
		return nil, err
	}
	if RiskRows(live, target) == 0 {
		return nil, nil // safe as it is
	}
	step := *next
	r.Apply(&step)
	st, err := Build(&step)
	if err != nil {
		return nil, err
	}
	n, m := RiskRows(live, st), RiskRows(st, target)
	if n == 0 && m != 0 && len(r.Added) > 1 {
		return nil, fmt.Errorf("%s: adding %s at once puts %d rows at risk even without the balance factor (rows where two new backends rank ahead of the old primary): add them one at a time", r.Table, strings.Join(r.Added, ", "), m)
	}
	if n != 0 || m != 0 {
		return nil, fmt.Errorf("%s: adding %s: no balance ramp (without the factor %d rows are at risk, then %d)", r.Table, strings.Join(r.Added, ", "), n, m)
	}
	return r, nil
}

// RiskRows counts the rows whose primary in old is neither hop in new, by
// address: the two may list different backends.
func RiskRows(old, new *Table) int {
	n := 0
	for r := range old.Rows {
		p := old.Backends[old.Rows[r].Primary].IP
		if new.Backends[new.Rows[r].Primary].IP != p && new.Backends[new.Rows[r].Secondary].IP != p {
			n++
		}
	}
	return n
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
			// The weighted key whether or not b ranks by one (with equal
			// weights it ranks by raw scores): loses compares k's.
			s := keyFor(expScore(b.words[i].score(st)), recip(b.wts[i]))
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
// table of its name (or position) is one lowered weight, or added
// backends under a balance factor, putting rows at risk, a ramp; and says
// why where there is none.
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
		} else if r != nil && (r.Kind == RampBalance || len(r.Steps) > 1) {
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
