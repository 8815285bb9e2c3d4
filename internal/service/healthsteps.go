package service

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/director/director/table"
)

// A health change of the served config that is unsafe as a whole is not
// simply held until it is safe, which may be never (backends coming back
// one at a time after an outage each move rows off the one that carried
// them). It is taken in the steps that are safe, through the same commit
// as any change:
//
//  1. Downs at once. A backend the checks found down is taken out however
//     the rest is judged: its rows are lost with it, and every moment it
//     stays in the table blackholes them. The ups are held back meanwhile.
//  2. Ups through a transition table (table.Transition): the new table,
//     but each row whose live primary it moves keeps that primary as its
//     secondary, so that its connections carry on through second chance,
//     as in a drain. No row is then at risk.
//  3. The new table itself, once the transition has served for the
//     table's ramp_interval_s (the longest of the tables'): from the
//     transition it moves no primary. A down meanwhile is not held.

// transitState is a transition table being served (its fingerprints),
// the change it leads to (the fingerprints of the tables that change
// makes), and when that change may follow.
type transitState struct {
	until        time.Time
	live, target []string
}

// transitWaits says why plan must wait for a transition to finish, or ""
// when it need not: no transition is live (its time is up, or the tables
// live are no longer it: applied over by hand, say), plan is not the
// change it leads to (judged as any other), or plan takes a backend down.
func (s *service) transitWaits(plan *table.Plan) string {
	if s.transit == nil {
		return ""
	}
	if !time.Now().Before(s.transit.until) || !slices.Equal(s.live.fps, s.transit.live) {
		s.transit = nil
		return ""
	}
	result := make([]string, len(plan.Result))
	for i, p := range plan.Result {
		result[i] = p.Fingerprint
	}
	if !slices.Equal(result, s.transit.target) || takesDown(plan.Diff) {
		return ""
	}
	return fmt.Sprintf("a health change is taken in two steps: the first (a transition that keeps the moved rows' "+
		"old primaries as their secondaries) is live, the second waits until %s (ramp_interval_s)", s.transit.until.UTC().Format(time.TimeOnly))
}

// takesDown reports whether d takes a backend from healthy to unhealthy.
func takesDown(d *table.Diff) bool {
	if d == nil {
		return false
	}
	for _, td := range d.Tables {
		for _, bc := range td.Backends {
			if bc.Old != nil && bc.New != nil && bc.Old.Healthy && !bc.New.Healthy {
				return true
			}
		}
	}
	return false
}

// healthSteps takes the next safe step of the served config's held health
// change (see above), and reports whether it applied one.
func (s *service) healthSteps(trigger string) bool {
	in := s.cur
	if len(in.judged) != len(in.cfg.Tables) || len(s.live.tables) != len(in.cfg.Tables) {
		return false
	}
	// 1. The downs alone.
	downs := make([]*table.Table, len(in.judged))
	var down []string
	for i := range in.judged {
		tc := in.judged[i]
		lt := s.liveTable(&tc, i)
		if lt == nil {
			return false
		}
		if !sameButHealth(lt.Backends, tc.Backends) {
			return false // more than health differs (a restart mid-ramp): not the checks' change
		}
		tc.Backends = slices.Clone(tc.Backends)
		changed := false
		for k, b := range tc.Backends {
			was, ok := table.HealthOf(lt, b.IP)
			switch {
			case !ok:
			case b.Healthy && !was:
				tc.Backends[k].Healthy = false // an up: held back for now
			case !b.Healthy && was:
				changed = true
				down = append(down, fmt.Sprintf("%s/%s", table.DisplayName(tc.Name, i), b.IP))
			}
		}
		if !changed {
			downs[i] = lt
			continue
		}
		t, err := table.Build(&tc)
		if err != nil {
			return false
		}
		downs[i] = t
	}
	if len(down) > 0 {
		s.tell(slog.LevelWarn, "the checks' change is held, but not its downs: applying them alone", "down", down)
		out, _ := s.commit(in, downs, trigger, judgeDowns)
		return out == applied
	}
	// 2. The ups through a transition.
	targets, _, _, err := s.desired(in)
	if err != nil {
		return false
	}
	steps := make([]*table.Table, len(targets))
	var through []string
	interval := time.Duration(0)
	for i, t := range targets {
		steps[i] = t
		if tr := table.Transition(s.live.tables[i], t); tr != nil {
			steps[i] = tr
			through = append(through, table.DisplayName(t.Name, i))
			interval = max(interval, rampInterval(&in.cfg.Tables[i]))
		}
	}
	if len(through) == 0 {
		return false
	}
	out, _ := s.commit(in, steps, trigger+" (transition)", judgeSafe)
	if out != applied {
		return false
	}
	target := make([]string, len(targets))
	for i, t := range targets {
		target[i] = table.Fingerprint(t)
	}
	s.transit = &transitState{until: time.Now().Add(interval), live: slices.Clone(s.live.fps), target: target}
	s.tell(slog.LevelInfo, "the checks' change is taken in two steps: a transition keeping the moved rows' old primaries as secondaries is live; "+
		"the change follows after ramp_interval_s", "tables", strings.Join(through, ", "), "next", interval)
	return true
}

// sameButHealth reports whether a and b list the same backends in the same
// order with the same states and weights: what differs, if anything, is
// health.
func sameButHealth(a, b []table.Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].IP != b[i].IP || a[i].State != b[i].State || a[i].W() != b[i].W() {
			return false
		}
	}
	return true
}
