package service

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/director/director/internal/change"
	"github.com/director/director/table"
)

// A health change of the served config that is unsafe as a whole (by
// GLB's two hops, in a table with history_hops false; with history in
// the packets, a health change is safe), or one that cannot be applied
// at all (a table the datapath cannot hold with the ups: issue 46, item
// 8), still has its downs applied at once: a backend the checks found down is taken out however the rest is
// judged, since its rows are lost with it, and every moment it stays in
// the table blackholes them. The ups are held meanwhile, until the
// verdict finds them safe: when the rows' earlier primaries they would
// strand are past the table's window.

// healthSteps applies the downs of the served config's held (or failed,
// out) health change alone (see above), and reports whether it applied
// them.
func (s *service) healthSteps(trigger string, out outcome) bool {
	in := s.cur
	if len(in.judged) != len(in.cfg().Tables) || len(s.live.tables) != len(in.cfg().Tables) {
		return false
	}
	// 1. The downs alone: each table's config with only them, built
	// through the pipeline (an unchanged table is the live one).
	judged := make([]table.TableConfig, len(in.judged))
	same := make([]*table.Table, len(in.judged)) // the live table, where it has no down
	var down []string
	for i := range in.judged {
		tc := in.judged[i]
		lt := s.liveTable(&tc, i)
		if lt == nil {
			return false
		}
		if !sameButHealth(lt.Backends, tc.Backends) {
			return false // more than health differs (an edit not yet adopted): not the checks' change
		}
		tc.Backends = slices.Clone(tc.Backends)
		same[i] = lt
		for k, b := range tc.Backends {
			was, ok := table.HealthOf(lt, b.IP)
			switch {
			case !ok:
			case b.Healthy && !was:
				tc.Backends[k].Healthy = false // an up: held back for now
			case !b.Healthy && was:
				down = append(down, fmt.Sprintf("%s/%s", table.DisplayName(tc.Name, i), b.IP))
				same[i] = nil
			}
		}
		judged[i] = tc
	}
	if len(down) == 0 {
		return false
	}
	src, _, _, err := in.src.Build(change.Against{
		Judge: func(i int, tc *table.TableConfig) { *tc = judged[i] },
		Reuse: func(i int, _ *table.TableConfig) *table.Table { return same[i] },
		Holds: s.holds,
	})
	if err != nil {
		return false
	}
	msg := "the checks' change is held, but not its downs: applying them alone"
	if out == failed {
		msg = "the checks' change cannot be applied, but its downs can: applying them alone"
	}
	s.tell(slog.LevelWarn, msg, "down", down)
	out, _ = s.commit(in, src.Tables, trigger, judgeDowns)
	return out == applied
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
