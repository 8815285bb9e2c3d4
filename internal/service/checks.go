package service

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/director/director/internal/health"
	"github.com/director/director/table"
)

// target is one backend address with one set of checks. A backend in
// several tables with the same checks is checked once.
type target struct {
	ip     netip.Addr
	checks health.Checks
	damp   *health.Dampener
	lastOK bool
	last   []health.Result
	// checkedAt is when the last result came in, and failingSince when
	// the current run of failed results began (zero while passing).
	checkedAt, failingSince time.Time
	// used marks targets the served or pending config still has.
	used bool
}

func targetKey(ip netip.Addr, c health.Checks) string {
	return fmt.Sprintf("%s %d %d %d %s", ip, c.HTTP, c.TCP, c.GUE, c.HTTPURI)
}

// checkedBackends calls f for each backend of in whose health the checks
// decide: no "healthy" in the config, and not inactive.
func checkedBackends(in *input, f func(i int, tc *table.TableConfig, k int, b table.Backend)) {
	for i := range in.cfg.Tables {
		tc := &in.cfg.Tables[i]
		for k, b := range tc.Backends {
			if b.Checked && b.State != table.StateInactive {
				f(i, tc, k, b)
			}
		}
	}
}

// track makes targets for the backends of the served and pending configs,
// drops the ones neither has, and runs a first check of the new ones
// before returning: the first result decides a new backend's health. A
// backend the live table already holds starts at its live health instead,
// so that a restart changes nothing until the checks, dampened, disagree.
func (s *service) track(ctx context.Context) {
	s.mu.Lock()
	for _, t := range s.targets {
		t.used = false
	}
	var fresh []*target
	rise, fall := s.cur.cfg.Checks.Rise, s.cur.cfg.Checks.Fall
	if s.pending != nil {
		rise, fall = s.pending.cfg.Checks.Rise, s.pending.cfg.Checks.Fall
	}
	for _, in := range []*input{s.cur, s.pending} {
		if in == nil {
			continue
		}
		checkedBackends(in, func(i int, tc *table.TableConfig, k int, b table.Backend) {
			c := health.ChecksOf(b.Healthchecks)
			key := targetKey(b.IP, c)
			t := s.targets[key]
			if t == nil {
				t = &target{ip: b.IP, checks: c, damp: health.NewDampener(rise, fall)}
				if up, ok := table.HealthOf(s.liveTable(tc, i), b.IP); ok {
					t.damp.StartAt(up)
					t.lastOK = up
				} else {
					fresh = append(fresh, t)
				}
				s.targets[key] = t
			}
			t.damp.Rise, t.damp.Fall = rise, fall
			t.used = true
		})
	}
	for key, t := range s.targets {
		if !t.used {
			delete(s.targets, key)
			s.m.forgetTarget(t)
		}
	}
	s.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.o.Concurrency)
	for _, t := range fresh {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.check(ctx, t, false)
		}()
	}
	wg.Wait()
	s.log.Info("first checks", "backends", len(fresh), "took", time.Since(start).Round(time.Millisecond))
}

// list is the targets in a fixed order, for the scheduler.
func (s *service) list() []*target {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*target, 0, len(s.targets))
	for _, t := range s.targets {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return targetKey(out[i].ip, out[i].checks) < targetKey(out[j].ip, out[j].checks) })
	return out
}

// startChecks starts checking every target, every interval.
func (s *service) startChecks(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	s.stopChecks = cancel
	done := make(chan struct{})
	s.checksDone = done
	ts := s.list()
	interval := s.cur.cfg.Checks.Interval
	if s.pending != nil {
		interval = s.pending.cfg.Checks.Interval
	}
	sch := &health.Scheduler{Interval: interval, Limit: s.o.Concurrency, Seed: uint64(time.Now().UnixNano())}
	go func() {
		defer close(done)
		sch.Run(ctx, len(ts), func(ctx context.Context, i int) { s.check(ctx, ts[i], true) })
	}()
}

// stopChecksWait stops the checks and waits for those under way.
func (s *service) stopChecksWait() {
	if s.stopChecks != nil {
		s.stopChecks()
		<-s.checksDone
		s.stopChecks = nil
	}
}

// check probes t once and records the result; with kick, a result that
// may change a table wakes the loop.
func (s *service) check(ctx context.Context, t *target, kick bool) {
	rs := s.prober.Probe(ctx, t.ip, t.checks)
	if ctx.Err() != nil {
		return // stopping: a cancelled probe says nothing about the backend
	}
	if health.Local(rs) {
		// The director's fault (out of descriptors, say): the backend
		// keeps the state it had.
		s.localFault(t, rs)
		return
	}
	ok := health.Healthy(rs)
	s.mu.Lock()
	was := t.damp.Up()
	known := t.damp.Known()
	changed := t.damp.Observe(ok)
	okChanged := ok != t.lastOK
	now := time.Now()
	if !ok && (t.lastOK || t.failingSince.IsZero()) {
		t.failingSince = now
	} else if ok {
		t.failingSince = time.Time{}
	}
	t.lastOK, t.last, t.checkedAt = ok, rs, now
	up := t.damp.Up()
	s.mu.Unlock()
	s.m.observe(t.ip, rs)
	if changed && known {
		s.log.Info("backend "+upDown(up), "backend", t.ip, "was", upDown(was), "checks", describe(rs))
	}
	if kick && (changed || okChanged || s.waiting.Load()) {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

func upDown(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

// describe is a round of results for a log line.
func describe(rs []health.Result) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ", ")
}

// localFault records a round of checks the director could not make for want
// of its own resources: counted, and logged at most once a minute, since
// every check then fails alike.
func (s *service) localFault(t *target, rs []health.Result) {
	for _, r := range rs {
		if r.Local {
			s.m.checksSkipped.WithLabelValues(r.Reason).Inc()
		}
	}
	now := time.Now()
	s.mu.Lock()
	quiet := now.Sub(s.lastLocalFault) < time.Minute
	if !quiet {
		s.lastLocalFault = now
	}
	s.mu.Unlock()
	if !quiet {
		s.log.Error("checks cannot be made: the director lacks a resource; backends keep their state", "backend", t.ip, "checks", describe(rs))
	}
}
