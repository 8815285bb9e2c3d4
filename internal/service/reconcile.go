package service

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/director/director/internal/change"
	"github.com/director/director/internal/service/status"
	"github.com/director/director/internal/shellword"
	"github.com/director/director/loader"
	"github.com/director/director/table"
)

// adopt gives in the builders of from's tables that in has too
// (change.Builders.Adopt), so that a config edit rebuilds only what it
// changed.
func adopt(in, from *input) {
	if from != nil {
		in.tables.Adopt(from.tables)
	}
}

// desired builds in's tables with the health the checks found, as
// judgeHealth decides it against the live tables, through the pipeline
// plan and apply take (change.Input.Build): frozen names the tables it
// holds fail-static.
func (s *service) desired(in *input) (tables []*table.Table, fps []string, frozen []string, err error) {
	views := s.checks.views()
	in.views = views
	waiting := false
	judge := func(i int, tc *table.TableConfig) {
		d := judgeHealth(tc, s.liveTable(tc, i), views, s.o.FailStatic)
		tc.Backends = d.Backends
		in.judged = append(in.judged[:min(i, len(in.judged))], *tc)
		if d.FailStatic {
			frozen = append(frozen, table.DisplayName(tc.Name, i))
		}
		waiting = waiting || d.Waiting
	}
	src, _, _, err := in.src.Build(change.Against{Judge: judge, Builders: in.tables, Holds: s.holds})
	s.checks.waiting.Store(waiting)
	if err != nil {
		return nil, nil, nil, err
	}
	for i := range src.Tables {
		_, fp := in.tables.Built(i)
		fps = append(fps, fp)
	}
	return src.Tables, fps, frozen, nil
}

// sameAsLive reports whether tables (and dc) are what the kernel holds, as
// far as the service knows: then there is nothing to plan.
func (s *service) sameAsLive(tables []*table.Table, fps []string, dc *table.DirectorConfig) bool {
	if len(tables) != len(s.live.tables) {
		return false
	}
	if dc != nil && (s.live.config == nil || len(table.CompareDirectorConfig(s.live.config, dc)) > 0) {
		return false
	}
	for i, t := range tables {
		l := s.live.tables[i]
		if t.Name != l.Name || fps[i] != s.live.fps[i] || len(t.Backends) != len(l.Backends) || len(t.Binds) != len(l.Binds) {
			return false
		}
		for k, b := range t.Backends {
			o := l.Backends[k]
			if b.IP != o.IP || b.State != o.State || b.Healthy != o.Healthy {
				return false
			}
		}
		for k := range t.Binds {
			if t.Binds[k] != l.Binds[k] {
				return false
			}
		}
	}
	return true
}

type outcome int

const (
	unchanged outcome = iota
	applied
	held
	failed
)

var errUnchanged = errors.New("nothing to change")

// buildError is a config that cannot be built with the health found.
type buildError struct{ err error }

func (e *buildError) Error() string { return e.err.Error() }
func (e *buildError) Unwrap() error { return e.err }

// heldError is an unsafe plan, which the service does not apply.
type heldError struct{ reasons []string }

func (e *heldError) Error() string { return "unsafe: " + strings.Join(e.reasons, "; ") }

// reconcile brings the kernel to what the config and the checks say,
// through the one path (loader.Director.Commit): a pending config edit
// first, and, while it is held, the served config with the health found.
// first allows an unsafe plan when nothing is live yet. It returns an
// error only for a config that cannot be built or applied.
func (s *service) reconcile(trigger string, first bool) error {
	heldCount := 0
	s.hold.now = nil
	defer func() {
		s.m.held.Set(float64(heldCount))
		s.announce()
		s.publish()
	}()
	if s.pending != nil {
		out, frozen, err := s.try(s.pending, trigger, first)
		switch {
		case err != nil:
			s.m.configErrors.Inc()
			s.tell(slog.LevelError, "config edit refused; the last good one is kept", "err", err)
			s.pending = nil
		case out == held:
			heldCount++
		default:
			s.tell(slog.LevelInfo, "config edit adopted", "config", s.o.Config, "result", map[outcome]string{applied: "applied", unchanged: "already live"}[out])
			s.cur, s.pending = s.pending, nil
			s.checksStale = true // the old config's checks go (retrack)
			s.setFailStatic(frozen)
			if s.life.started {
				if err := s.startBGP(); err != nil {
					s.log.Error("bgp", "err", err)
				}
			}
			return nil
		}
	}
	out, frozen, err := s.try(s.cur, trigger, first)
	var be *buildError
	if errors.As(err, &be) {
		// The served config, built with the health found, cannot be
		// applied (the commit says why of its own failures): counted
		// each round, logged once until it can be again.
		s.m.applies.WithLabelValues("failed").Inc()
		s.once("build", "cannot build the tables the checks call for; the live tables keep serving", "err", be.err)
	} else if out != failed {
		s.resolved("build", "the tables the checks call for can be built again")
	}
	if (out == held || out == failed) && s.healthSteps(trigger, out) {
		// A safe step of it is live; the rest is still to come.
		s.hold.now = nil
		out, frozen, err = s.try(s.cur, trigger, false)
	}
	s.hold.health = out == held || out == failed // retried: a failure may pass
	if out == held {
		heldCount++
	}
	if err == nil {
		s.setFailStatic(frozen)
	}
	if s.pending == nil && out != held {
		s.hold.logged = ""
	}
	return err
}

// try plans in against what is live and applies it when safe.
func (s *service) try(in *input, trigger string, first bool) (outcome, []string, error) {
	tables, fps, frozen, err := s.desired(in)
	if err != nil {
		return failed, nil, &buildError{err}
	}
	if s.sameAsLive(tables, fps, in.dc) && !s.historyDue(time.Now()) {
		return unchanged, frozen, nil
	}
	mode := judgeSafe
	if first {
		mode = judgeFirst
	}
	out, err := s.commit(in, tables, trigger, mode)
	return out, frozen, err
}

// judgeMode is what commit applies of a plan.
type judgeMode int

const (
	judgeSafe  judgeMode = iota // safe plans only
	judgeFirst                  // and any, when nothing is live yet
	judgeDowns                  // any: backends the checks found down (never held)
)

// commit applies tables (with in's director config) through the one path,
// as mode allows, and records what it did.
func (s *service) commit(in *input, tables []*table.Table, trigger string, mode judgeMode) (outcome, error) {
	changes := s.changes(in, tables)
	before := append([]string(nil), s.live.fps...)
	start := time.Now()
	var allowedUnsafe bool
	var room int // rows at risk only for want of room in their hops
	plan, res, err := s.d.Commit(&loader.Proposal{Tables: tables, Config: in.dc}, func(live loader.State, plan *table.Plan) error {
		if !plan.Changed() && !historyChanged(live, plan) {
			return errUnchanged
		}
		if plan.Safe {
			return nil
		}
		if room = wantOfRoom(plan); room > 0 {
			return nil
		}
		if (mode == judgeFirst && len(live.Tables) == 0) || mode == judgeDowns {
			allowedUnsafe = true
			return nil
		}
		return &heldError{reasons: slices.Clone(plan.Reasons)}
	})
	for _, w := range s.d.StateWarnings {
		s.tell(slog.LevelWarn, "saved tables", "warning", w)
	}
	s.d.StateWarnings = nil
	var he *heldError
	switch {
	case errors.Is(err, errUnchanged):
		// Live already (applied by hand, say): the service's view was old.
		s.setLive(tables, plan.Result, in.dc)
		return unchanged, nil
	case errors.As(err, &he):
		s.m.applies.WithLabelValues("held").Inc()
		s.hold.now = append(s.hold.now, status.Held{Tables: table.PlanTables(tables), Config: status.ConfigDigest(in.dc), Health: in == s.cur,
			ConfigChanges: in.dc != nil && (s.live.config == nil || len(table.CompareDirectorConfig(s.live.config, in.dc)) > 0), Reasons: he.reasons})
		why := strings.Join(he.reasons, "; ")
		if why != s.hold.logged {
			s.hold.logged = why
			switch {
			case in != s.cur:
				s.tell(slog.LevelWarn, "UNSAFE config edit held: what is live keeps serving, and the edit is tried again every check interval and applied once it is safe; review it with 'director plan' and apply it with "+
					"'director apply --allow-unsafe' if it is what you want now", "config", s.o.Config, "reasons", he.reasons, "changes", changes,
					"run", s.heldCommands(false))
			default:
				s.tell(slog.LevelWarn, "UNSAFE health change held: applied by the service once it is safe (when the rows' earlier primaries it strands are past the window); "+
					"a person may apply it sooner with 'director healthcheck' and 'director apply --allow-unsafe'",
					"config", s.o.Config, "reasons", he.reasons, "changes", changes, "run", s.heldCommands(true))
			}
		}
		return held, nil
	case err != nil:
		s.m.applies.WithLabelValues("failed").Inc()
		s.tell(slog.LevelError, "apply failed; the live tables keep serving", "trigger", trigger, "err", err)
		if res != nil { // applied, but not as planned: read what is there
			if live, lerr := s.d.LiveState(); lerr == nil {
				s.setLive(live.Tables, table.PlanTables(live.Tables), live.Config)
				s.setHists(live.Histories)
			}
		}
		return failed, err
	}
	took := time.Since(start)
	s.m.applies.WithLabelValues("applied").Inc()
	s.m.applyDuration.Observe(took.Seconds())
	s.m.lastApply.SetToCurrentTime()
	s.setLive(loader.Tables(res.Tables), plan.Result, in.dc)
	s.setHists(loader.Histories(res.Tables))
	verdict := "safe"
	switch {
	case room > 0:
		verdict = fmt.Sprintf("%d rows at risk for want of room: they had more earlier primaries than their hops hold (%d); applied, as waiting would hold the change for the window",
			room, table.HistoryHops)
		s.m.historyOverflow.Add(float64(room))
	case allowedUnsafe && mode == judgeDowns:
		verdict = "unsafe, applied because backends went down (a down is never held): " + strings.Join(plan.Reasons, "; ")
	case allowedUnsafe:
		verdict = "unsafe, applied because nothing was live: " + strings.Join(plan.Reasons, "; ")
	}
	var fpChanges []string
	for i, p := range plan.Result {
		old := "(new)"
		if i < len(before) && i < len(plan.Base) && plan.Base[i].Name == p.Name {
			old = table.ShortFingerprint(before[i])
		}
		fpChanges = append(fpChanges, fmt.Sprintf("%s %s->%s", table.DisplayName(p.Name, i), old, table.ShortFingerprint(p.Fingerprint)))
	}
	s.tell(slog.LevelInfo, "applied", "trigger", trigger, "verdict", verdict, "changes", changes, "fingerprints", fpChanges,
		"took", took.Round(time.Microsecond))
	s.pub.lastApply = &status.Apply{Time: time.Now().UTC(), Trigger: trigger, Verdict: verdict, Changes: changes}
	s.pub.recent = append([]status.Apply{*s.pub.lastApply}, s.pub.recent[:min(len(s.pub.recent), status.RecentApplies-1)]...)
	return applied, nil
}

// changes lists, for the audit log, what tables change from the live ones
// and why: a config edit, or what the checks found.
func (s *service) changes(in *input, tables []*table.Table) []string {
	var out []string
	seen := map[*table.Table]bool{}
	for i, t := range tables {
		tc := &in.cfg().Tables[i]
		name := table.DisplayName(tc.Name, i)
		lt := s.liveTable(tc, i)
		if lt == nil {
			out = append(out, fmt.Sprintf("%s: table added (config edit)", name))
			continue
		}
		seen[lt] = true
		if lt == t || sameStates(lt.Backends, t.Backends) {
			// No backend came, went or changed: the usual table of an
			// edit, told in one comparison.
			if !slices.Equal(lt.Binds, t.Binds) {
				out = append(out, fmt.Sprintf("%s: binds changed (config edit)", name))
			}
			continue
		}
		old := map[netip.Addr]table.Backend{}
		for _, b := range lt.Backends {
			old[b.IP] = b
		}
		for k, b := range t.Backends {
			// The config's, not the table's: a table built for an earlier
			// config with the same rows is taken as it is, checks and all.
			b.Checked, b.Healthchecks = tc.Backends[k].Checked, tc.Backends[k].Healthchecks
			o, ok := old[b.IP]
			delete(old, b.IP)
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s/%s: added, %s, %s (config edit)", name, b.IP, b.State, upDown(b.Healthy)))
			case o.State != b.State:
				out = append(out, fmt.Sprintf("%s/%s: %s -> %s (config edit)", name, b.IP, o.State, b.State))
			case o.Healthy != b.Healthy:
				out = append(out, fmt.Sprintf("%s/%s: %s (%s)", name, b.IP, upDown(b.Healthy), why(in.views, b)))
			case o.W() != b.W():
				out = append(out, fmt.Sprintf("%s/%s: weight %d -> %d", name, b.IP, o.W(), b.W()))
			}
		}
		var gone []string
		for ip := range old {
			gone = append(gone, ip.String())
		}
		sort.Strings(gone)
		for _, ip := range gone {
			out = append(out, fmt.Sprintf("%s/%s: removed (config edit)", name, ip))
		}
		if !slices.Equal(lt.Binds, t.Binds) {
			out = append(out, fmt.Sprintf("%s: binds changed (config edit)", name))
		}
	}
	for i, lt := range s.live.tables {
		if !seen[lt] {
			out = append(out, fmt.Sprintf("%s: table removed (config edit)", table.DisplayName(lt.Name, i)))
		}
	}
	if in.dc != nil && (s.live.config == nil || len(table.CompareDirectorConfig(s.live.config, in.dc)) > 0) {
		out = append(out, "director config changed (config edit)")
	}
	return out
}

// setFailStatic exports which of the served config's tables are held
// fail-static, and says so loudly when that changes.
func (s *service) setFailStatic(frozen []string) {
	now := map[string]bool{}
	for _, n := range frozen {
		now[n] = true
	}
	for i := range s.cur.cfg().Tables {
		name := table.DisplayName(s.cur.cfg().Tables[i].Name, i)
		v := 0.0
		if now[name] {
			v = 1
		}
		s.m.failStatic.WithLabelValues(name).Set(v)
	}
	for n := range now {
		if !s.failStatic[n] {
			s.tell(slog.LevelError, "FAIL-STATIC: too many backends of the table fail their checks at once; keeping the last table. "+
				s.failStaticWhy(n), "table", n, "fraction", s.o.FailStatic)
		}
	}
	for n := range s.failStatic {
		if !now[n] {
			s.tell(slog.LevelInfo, "fail-static over: the checks agree again", "table", n)
		}
	}
	s.failStatic = now
}

// failStaticWhy says what the checks of the served config's table name
// point at (failStaticWhy of their results).
func (s *service) failStaticWhy(name string) string {
	var backends []table.Backend
	checkedBackends(s.cur, func(i int, tc *table.TableConfig, k int, b table.Backend) {
		if table.DisplayName(tc.Name, i) == name {
			backends = append(backends, b)
		}
	})
	return failStaticWhy(s.checks.results(backends))
}

// sameStates reports whether a and b list the same backends in the same
// order with the same state, health and weight: what changes reports.
func sameStates(a, b []table.Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].IP != b[i].IP || a[i].State != b[i].State || a[i].Healthy != b[i].Healthy || a[i].W() != b[i].W() {
			return false
		}
	}
	return true
}

// historyChanged reports whether a plan changes what the live tables
// remember of their rows' earlier primaries, and nothing else: an entry
// past its window, say, which the service applies so that it stops being
// listed.
func historyChanged(live loader.State, plan *table.Plan) bool {
	for i, h := range plan.Histories {
		var l *table.History
		if i < len(live.Histories) {
			l = live.Histories[i]
		}
		if !l.Equal(h) {
			return true
		}
	}
	return false
}

// wantOfRoom is the number of rows a plan puts at risk only because they
// had more earlier primaries than their hops hold, when that is its only
// reason to be unsafe; else 0. Such a change is applied: holding it would
// wait for the window, and the rows are counted and logged.
func wantOfRoom(plan *table.Plan) int {
	d := *plan.Diff
	d.Tables = slices.Clone(d.Tables)
	room := 0
	for i, td := range d.Tables {
		if h := td.History; h != nil && h.Hops && td.Rows.AtRisk > 0 && td.Rows.AtRisk == h.Overflow {
			room += td.Rows.AtRisk
			d.Tables[i].Rows.AtRisk = 0
		}
	}
	if safe, _ := table.Verdict(&d); !safe {
		return 0
	}
	return room
}

// historyDue reports whether an entry of a live history has reached its
// expiry: the tables are written again without it.
func (s *service) historyDue(now time.Time) bool {
	for _, h := range s.live.hists {
		if h.Empty() {
			continue
		}
		for _, e := range h.Expires {
			if e <= now.UnixNano() {
				return true
			}
		}
	}
	return false
}

// heldCommands are the commands, to be run as printed, by which a person
// releases the change the service holds (status.ReleaseCommands), spelled with
// its --bpffs, director config and config, absolute.
func (s *service) heldCommands(health bool) []string {
	cli := "director"
	if s.o.BPFFS != loader.DefaultBPFFS {
		cli += " --bpffs " + shellword.Join(s.o.BPFFS)
	}
	abs := func(p string) string { // for a shell in any directory
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	dc := ""
	if s.o.DirectorConfig != "" {
		dc = abs(s.o.DirectorConfig)
	}
	return status.ReleaseCommands(cli, dc, abs(s.o.Config), health)
}
