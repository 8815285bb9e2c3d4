package service

import (
	"slices"
	"time"

	"github.com/director/director/table"
)

// A held config edit that only lowers weights, or only adds backends to a
// table with a balance factor, where a one-step change would put rows at
// risk, is carried out as a ramp (table.FindRamp): every
// ramp_interval_s, the first step of the ramp from what is live now is
// applied, through the same plan and apply as any change, until what is
// live is the edit, which is then adopted as usual. The ramp is found
// again from the live tables at each step, so a restart, a health change
// or a hand apply between steps leaves nothing stale to carry on from.

// rampState is when the next step of a ramp is due, and for which edit.
type rampState struct {
	target *input
	next   time.Time
	step   *input   // the last step applied, whose builders the next reuses
	last   []string // what it took
}

// rampWaits reports whether a ramp towards the pending edit is under way
// with its next step not yet due: the edit is not tried meanwhile, even
// once its last step is safe on its own, so that every step keeps the
// interval.
func (s *service) rampWaits(now time.Time) bool {
	return s.ramp != nil && s.ramp.target == s.pending && now.Before(s.ramp.next)
}

// rampStep applies the next step of a ramp towards the pending edit, when
// one is due, and reports whether it did. The edit must be held, and its
// only differences from what is live the lowered weights ramps take. The
// step becomes the served config, so that health changes meanwhile are
// applied to it rather than undo it. When what is left is safe in one
// step, it returns false with the ramp ended: the edit is then applied as
// the last step, as any safe edit is.
func (s *service) rampStep(now time.Time) bool {
	in := s.pending
	if in == nil || len(in.judged) != len(in.cfg.Tables) {
		s.ramp = nil
		return false
	}
	going := s.ramp != nil && s.ramp.target == in
	if going && now.Before(s.ramp.next) {
		return false
	}
	ramps, problems := table.Ramps(s.live.tables, &table.Config{Tables: in.judged})
	if len(ramps) == 0 && len(problems) == 0 && going {
		s.ramp = nil // the rest is one safe step: the edit itself
		return false
	}
	if len(ramps) == 0 || len(problems) > 0 || !s.onlyRamped(in, ramps) {
		if going {
			s.log.Warn("ramp stopped: the held edit is no longer one with a safe ramp", "problems", problems)
		}
		s.ramp = nil
		return false
	}
	step := &input{dc: in.dc, cfg: &table.Config{Checks: in.cfg.Checks, Warnings: in.cfg.Warnings, Tables: slices.Clone(in.cfg.Tables)}}
	if going && s.ramp.step != nil {
		step.builders, step.memo = s.ramp.step.builders, s.ramp.step.memo // incremental from the last step
	} else {
		step.builders, step.memo = make([]*table.Builder, len(in.cfg.Tables)), make([]built, len(in.cfg.Tables))
	}
	interval := time.Duration(0)
	var what []string
	for _, r := range ramps {
		i := tableIndex(in.cfg, r.Table)
		tc := &step.cfg.Tables[i]
		r.Apply(tc)
		interval = max(interval, rampInterval(tc))
		what = append(what, r.String())
	}
	if !going {
		s.log.Info("the held edit is carried out as a ramp, each step with no row at risk", "ramps", what, "interval", interval)
	}
	out, _, err := s.try(step, "ramp", false)
	if err != nil || out != applied {
		s.log.Warn("ramp step not applied; the ramp is found again from what is live at the next interval", "step", what, "err", err)
		s.ramp = &rampState{target: in, next: now.Add(interval)}
		return false
	}
	s.log.Info("ramp step applied", "steps", what, "next", interval)
	s.cur = step
	s.ramp = &rampState{target: in, next: time.Now().Add(interval), step: step, last: what}
	return true
}

// onlyRamped reports whether the tables of in that differ from what is live
// are the ones ramps take.
func (s *service) onlyRamped(in *input, ramps []table.Ramp) bool {
	for i := range in.cfg.Tables {
		name := table.DisplayName(in.cfg.Tables[i].Name, i)
		if slices.ContainsFunc(ramps, func(r table.Ramp) bool { return r.Table == name }) {
			continue
		}
		if i >= len(in.memo) || i >= len(s.live.fps) || in.memo[i].fp != s.live.fps[i] {
			return false
		}
	}
	return true
}

func tableIndex(c *table.Config, name string) int {
	for i := range c.Tables {
		if table.DisplayName(c.Tables[i].Name, i) == name {
			return i
		}
	}
	return -1
}

func rampInterval(tc *table.TableConfig) time.Duration {
	if tc.RampInterval > 0 {
		return tc.RampInterval
	}
	return table.DefaultRampInterval
}

// rampStatus is the ramp under way, for the status file.
func (s *service) rampStatus() *StatusRamp {
	if s.ramp == nil || s.ramp.target != s.pending || s.ramp.last == nil {
		return nil
	}
	return &StatusRamp{Next: s.ramp.next.UTC(), Last: s.ramp.last}
}
