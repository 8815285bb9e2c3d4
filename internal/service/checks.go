package service

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/director/director/internal/service/health"
	"github.com/director/director/internal/service/status"
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
	// flip is the round of results that last changed the backend's
	// health: what an apply of that change says it was for, however the
	// checks have gone since.
	flip []health.Result
	// checkedAt is when the last result came in, and failingSince when
	// the current run of failed results began (zero while passing).
	checkedAt, failingSince time.Time
	// used marks targets the served or pending config still has.
	used bool
	// failures counts the failed rounds.
	failures uint64
}

func targetKey(ip netip.Addr, c health.Checks) string {
	return fmt.Sprintf("%s %d %d %d %s", ip, c.HTTP, c.TCP, c.GUE, c.HTTPURI)
}

// checkedBackends calls f for each backend of in whose health the checks
// decide: no "healthy" in the config, and not inactive.
func checkedBackends(in *input, f func(i int, tc *table.TableConfig, k int, b table.Backend)) {
	for i := range in.cfg().Tables {
		tc := &in.cfg().Tables[i]
		for k, b := range tc.Backends {
			if b.Checked && b.State != table.StateInactive {
				f(i, tc, k, b)
			}
		}
	}
}

// checker runs the backends' checks. The check goroutines write the
// targets under mu; the service's loop reads them only through the
// methods here (views, summary, why, results), and alone starts, stops and
// reconfigures the checks.
type checker struct {
	log         *slog.Logger
	m           *metrics
	kick        chan struct{} // a result that may change a table wakes the loop
	concurrency int

	mu             sync.Mutex
	targets        map[string]*target
	lastLocalFault time.Time // when a check the director could not make was last logged

	prober *health.Prober // replaced only while the checks are stopped
	// waiting is set while a backend's fall waits for the others' next
	// results (judgeHealth): every result then wakes the loop.
	waiting atomic.Bool
	stop    context.CancelFunc
	done    chan struct{}
}

func newChecker(log *slog.Logger, concurrency int) *checker {
	return &checker{log: log, concurrency: concurrency, kick: make(chan struct{}, 1), targets: map[string]*target{}}
}

// configure makes the prober probe with timeout from src. The checks must
// be stopped.
func (c *checker) configure(timeout time.Duration, src health.Sources) {
	if c.prober == nil || c.prober.Timeout != timeout || c.prober.Sources != src {
		if c.prober != nil {
			c.prober.Close()
		}
		c.prober = health.NewProber(timeout, src)
	}
}

func (c *checker) close() {
	c.stopWait()
	if c.prober != nil {
		c.prober.Close()
		c.prober = nil
	}
}

// track makes targets for the checked backends of ins, drops the ones none
// has, and runs a first check of the new ones before returning: the first
// result decides a new backend's health. A backend whose live health
// liveHealth knows starts at it instead, so that a restart changes nothing
// until the checks, dampened, disagree.
func (c *checker) track(ctx context.Context, ins []*input, rise, fall int, liveHealth func(tc *table.TableConfig, i int, ip netip.Addr) (up, ok bool)) {
	c.mu.Lock()
	for _, t := range c.targets {
		t.used = false
	}
	var fresh []*target
	for _, in := range ins {
		if in == nil {
			continue
		}
		checkedBackends(in, func(i int, tc *table.TableConfig, k int, b table.Backend) {
			checks := health.ChecksOf(b.Healthchecks)
			key := targetKey(b.IP, checks)
			t := c.targets[key]
			if t == nil {
				t = &target{ip: b.IP, checks: checks, damp: health.NewDampener(rise, fall)}
				if up, ok := liveHealth(tc, i, b.IP); ok {
					t.damp.StartAt(up)
					t.lastOK = up
				} else {
					fresh = append(fresh, t)
				}
				c.targets[key] = t
			}
			t.damp.Rise, t.damp.Fall = rise, fall
			t.used = true
		})
	}
	for key, t := range c.targets {
		if !t.used {
			delete(c.targets, key)
			c.m.forgetTarget(t)
		}
	}
	c.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, c.concurrency)
	for _, t := range fresh {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c.check(ctx, t, false)
		}()
	}
	wg.Wait()
	c.log.Info("first checks", "backends", len(fresh), "took", time.Since(start).Round(time.Millisecond))
}

// list is the targets in a fixed order, for the scheduler.
func (c *checker) list() []*target {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*target, 0, len(c.targets))
	for _, t := range c.targets {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return targetKey(out[i].ip, out[i].checks) < targetKey(out[j].ip, out[j].checks) })
	return out
}

// start checks every target, every interval.
func (c *checker) start(ctx context.Context, interval time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	c.stop = cancel
	done := make(chan struct{})
	c.done = done
	ts := c.list()
	sch := &health.Scheduler{Interval: interval, Limit: c.concurrency, Seed: uint64(time.Now().UnixNano())}
	go func() {
		defer close(done)
		sch.Run(ctx, len(ts), func(ctx context.Context, i int) { c.check(ctx, ts[i], true) })
	}()
}

// stopWait stops the checks and waits for those under way.
func (c *checker) stopWait() {
	if c.stop != nil {
		c.stop()
		<-c.done
		c.stop = nil
	}
}

// check probes t once and records the result; with kick, a result that
// may change a table wakes the loop.
func (c *checker) check(ctx context.Context, t *target, kick bool) {
	rs := c.prober.Probe(ctx, t.ip, t.checks)
	if ctx.Err() != nil {
		return // stopping: a cancelled probe says nothing about the backend
	}
	if health.Local(rs) {
		// The director's fault (out of descriptors, say): the backend
		// keeps the state it had.
		c.localFault(t, rs)
		return
	}
	ok := health.Healthy(rs)
	c.mu.Lock()
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
	if !ok {
		t.failures++
	}
	if changed {
		t.flip = rs
	}
	up := t.damp.Up()
	c.mu.Unlock()
	c.m.observe(t.ip, rs)
	if changed && known {
		c.log.Info("backend "+upDown(up), "backend", t.ip, "was", upDown(was), "checks", describe(rs))
	}
	if kick && (changed || okChanged || c.waiting.Load()) {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// localFault records a round of checks the director could not make for want
// of its own resources: counted, and logged at most once a minute, since
// every check then fails alike.
func (c *checker) localFault(t *target, rs []health.Result) {
	for _, r := range rs {
		if r.Local {
			c.m.checksSkipped.WithLabelValues(r.Reason).Inc()
		}
	}
	now := time.Now()
	c.mu.Lock()
	quiet := now.Sub(c.lastLocalFault) < time.Minute
	if !quiet {
		c.lastLocalFault = now
	}
	c.mu.Unlock()
	if !quiet {
		c.log.Error("checks cannot be made: the director lacks a resource; backends keep their state", "backend", t.ip, "checks", describe(rs))
	}
}

// views is what the checks last found of every target, by targetKey.
func (c *checker) views() map[string]checkView {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]checkView, len(c.targets))
	for k, t := range c.targets {
		out[k] = checkView{up: t.damp.Up(), ok: t.lastOK, checkedAt: t.checkedAt, failingSince: t.failingSince, flip: t.flip, last: t.last}
	}
	return out
}

// summary sums up the targets for the status.
func (c *checker) summary() status.Checks {
	var s status.Checks
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.targets {
		s.Backends++
		if t.damp.Up() {
			s.Up++
		} else {
			s.Down++
		}
		if !t.lastOK {
			s.Failing++
		}
	}
	return s
}

// backends are the targets' last results for the status, by address (a
// backend checked two ways, in two tables, appears twice).
func (c *checker) backends() []status.Backend {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]status.Backend, 0, len(c.targets))
	for _, t := range c.targets {
		b := status.Backend{IP: t.ip.String(), Up: t.damp.Up(), Passing: t.lastOK, Failures: t.failures, Results: []status.Result{}}
		for _, r := range t.last {
			b.Results = append(b.Results, status.Result{Kind: r.Kind, OK: r.OK, LatencyMS: float64(r.Latency.Microseconds()) / 1000, Reason: r.Reason})
		}
		if !t.checkedAt.IsZero() {
			at := t.checkedAt.UTC()
			b.CheckedAt = &at
		}
		if !t.failingSince.IsZero() {
			at := t.failingSince.UTC()
			b.FailingSince = &at
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := netip.MustParseAddr(out[i].IP), netip.MustParseAddr(out[j].IP)
		if a != b {
			return a.Less(b)
		}
		return len(out[i].Results) < len(out[j].Results)
	})
	return out
}

// count is how many targets there are.
func (c *checker) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.targets)
}

// why says, for the audit log, what moved a checked backend, from views,
// the checks as the build saw them: the results that flipped it to the
// health b has, or, when they no longer say so (a held change applied
// later), its last results.
func why(views map[string]checkView, b table.Backend) string {
	if !b.Checked {
		return "config edit"
	}
	v, ok := views[targetKey(b.IP, health.ChecksOf(b.Healthchecks))]
	switch {
	case !ok:
		return "checks"
	case len(v.flip) > 0 && v.up == b.Healthy:
		return "checks: " + describe(v.flip)
	case len(v.last) > 0:
		return "checks: " + describe(v.last)
	}
	return "checks"
}

// results are the last results of the targets of backends.
func (c *checker) results(backends []table.Backend) [][]health.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]health.Result
	for _, b := range backends {
		if t := c.targets[targetKey(b.IP, health.ChecksOf(b.Healthchecks))]; t != nil {
			out = append(out, t.last)
		}
	}
	return out
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
