package service

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/director/director/internal/change"
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

// rampWaits reports whether a ramp is under way with its next step not yet
// due: the pending edit is not tried meanwhile, even once its last step is
// safe on its own, so that every step keeps the interval. The interval
// runs from the last step applied (s.rampLast, kept across restarts), not
// from when this edit was read: a config read again, or edited again,
// mid-ramp does not make the next step due.
func (s *service) rampWaits(now time.Time) bool {
	return s.ramp != nil && now.Before(s.ramp.next)
}

// rampFile is where the time of the last ramp step is kept for the next
// start of the service on these pins (the LockDir, a run directory).
func (s *service) rampFile() string { return runFile(s.o.LockDir, s.o.BPFFS, ".ramp.json") }

// loadRampLast reads the last ramp step's time a previous run recorded; a
// file that is not one (or too large to be) is ignored.
func (s *service) loadRampLast() {
	path := s.rampFile()
	if path == "" {
		return
	}
	data, err := readRegular(path, 4096, "a ramp record")
	if err != nil {
		return
	}
	var rec struct {
		LastStep time.Time `json:"last_step"`
	}
	if json.Unmarshal(data, &rec) == nil && !rec.LastStep.After(time.Now()) {
		s.rampLast = rec.LastStep
	}
}

// saveRampLast records a ramp step's time, written aside and renamed.
func (s *service) saveRampLast(t time.Time) {
	s.rampLast = t
	path := s.rampFile()
	if path == "" {
		return
	}
	data, _ := json.Marshal(struct {
		LastStep time.Time `json:"last_step"`
	}{t.UTC()})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err == nil {
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
		}
	}
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
	if in == nil && s.hold.health {
		// The served config itself is held: after a restart mid-ramp, the
		// config files are the edit and what is live is a step.
		in = s.cur
	}
	if in == nil || len(in.judged) != len(in.cfg.Tables) {
		s.ramp = nil
		return false
	}
	going := s.ramp != nil
	if going && now.Before(s.ramp.next) {
		return false
	}
	ramps, problems := s.ramps(in)
	if len(ramps) == 0 && len(problems) == 0 && going {
		s.ramp = nil // the rest is one safe step: the edit itself
		return false
	}
	if len(ramps) == 0 || len(problems) > 0 || !s.onlyRamped(in, ramps) {
		if going {
			s.tell(slog.LevelWarn, "ramp stopped: the held edit is no longer one with a safe ramp", "problems", problems)
		}
		s.ramp = nil
		return false
	}
	step := &input{dc: in.dc, cfg: &table.Config{Checks: in.cfg.Checks, Warnings: in.cfg.Warnings, Tables: slices.Clone(in.cfg.Tables)}}
	if going && s.ramp.step != nil {
		step.tables = s.ramp.step.tables.For(step.cfg) // incremental from the last step
	} else {
		step.tables = change.NewBuilders(step.cfg)
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
	if due := s.rampLast.Add(interval); now.Before(due) {
		// The last step (of this ramp, one before an edit or a restart)
		// was less than an interval ago.
		s.ramp = &rampState{target: in, next: due}
		return false
	}
	if !going {
		s.tell(slog.LevelInfo, "the held edit is carried out as a ramp, each step with no row at risk", "ramps", what, "interval", interval)
	}
	out, _, err := s.try(step, "ramp", false)
	if err != nil || out != applied {
		s.tell(slog.LevelWarn, "ramp step not applied; the ramp is found again from what is live at the next interval", "step", what, "err", err)
		s.ramp = &rampState{target: in, next: now.Add(interval)}
		return false
	}
	s.tell(slog.LevelInfo, "ramp step applied", "steps", what, "next", interval)
	s.saveRampLast(time.Now())
	if s.pending == nil {
		s.pending = in // the served config was the edit: it is now what the ramp goes to
	}
	s.cur = step
	s.ramp = &rampState{target: in, next: s.rampLast.Add(interval), step: step, last: what}
	return true
}

// ramps are the ramps from what is live towards in, and what stops one.
// Finding them builds tables (slow in an emulated guest, and not free
// anywhere): the answer is kept for as long as the edit, its judged
// tables and what is live stay.
func (s *service) ramps(in *input) ([]table.Ramp, []string) {
	key := strings.Join(s.live.fps, ",")
	for i := range in.judged {
		_, fp := in.tables.Built(i)
		key += "|" + fp
	}
	if s.rampSeen.in != in || s.rampSeen.key != key {
		ramps, problems := table.Ramps(s.live.tables, &table.Config{Tables: in.judged})
		s.rampSeen = rampSeen{in: in, key: key, ramps: ramps, problems: problems}
	}
	return s.rampSeen.ramps, s.rampSeen.problems
}

// rampSeen is what ramps last found, and for what.
type rampSeen struct {
	in       *input
	key      string
	ramps    []table.Ramp
	problems []string
}

// rampable reports whether in, an edit held as unsafe, is one a ramp
// takes by itself: such an edit waits for no one, so it is neither counted,
// listed nor logged as held.
func (s *service) rampable(in *input) bool {
	if in == nil || in == s.cur || len(in.judged) != len(in.cfg.Tables) {
		return false
	}
	ramps, problems := s.ramps(in)
	return len(ramps) > 0 && len(problems) == 0 && s.onlyRamped(in, ramps)
}

// onlyRamped reports whether the tables of in that differ from what is live
// are the ones ramps take.
func (s *service) onlyRamped(in *input, ramps []table.Ramp) bool {
	for i := range in.cfg.Tables {
		name := table.DisplayName(in.cfg.Tables[i].Name, i)
		if slices.ContainsFunc(ramps, func(r table.Ramp) bool { return r.Table == name }) {
			continue
		}
		if _, fp := in.tables.Built(i); i >= len(s.live.fps) || fp != s.live.fps[i] {
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
	if s.ramp == nil || s.ramp.last == nil {
		return nil
	}
	return &StatusRamp{Next: s.ramp.next.UTC(), Last: s.ramp.last}
}

// rampGate says why plan must wait, or "": a change of backends (their
// weights, states, or which there are) to a table within its
// ramp_interval_s of the last ramp step (s.rampLast, this run's or the
// one's before it): so that a ramp's last step, the edit itself, keeps the
// interval too, read again or after a restart.
func (s *service) rampGate(in *input, plan *table.Plan) string {
	if s.rampLast.IsZero() || plan.Diff == nil {
		return ""
	}
	for _, td := range plan.Diff.Tables {
		moved := false
		for _, bc := range td.Backends {
			if bc.Old == nil || bc.New == nil || bc.Old.Weight != bc.New.Weight || bc.Old.State != bc.New.State {
				moved = true
				break
			}
		}
		i := tableIndex(in.cfg, td.Name)
		if !moved || i < 0 {
			continue
		}
		if due := s.rampLast.Add(rampInterval(&in.cfg.Tables[i])); time.Now().Before(due) {
			return fmt.Sprintf("table %s: a ramp step was applied at %s; its backends change again no sooner than "+
				"ramp_interval_s after it (%s)", td.Name, s.rampLast.UTC().Format(time.TimeOnly), due.UTC().Format(time.TimeOnly))
		}
	}
	return ""
}
