package service

import (
	"time"

	"github.com/director/director/internal/service/health"
	"github.com/director/director/table"
)

// checkView is what the checks last found of one target.
type checkView struct {
	up, ok                  bool // dampened state; last result passed
	checkedAt, failingSince time.Time
	// flip and last are the results that last flipped the state and the
	// last ones: kept with the view so that a change is told by what the
	// build saw, not by a check made since.
	flip, last []health.Result
}

// healthDecision is judgeHealth's answer for one table.
type healthDecision struct {
	// Backends are the table's backends with the health to build.
	Backends []table.Backend
	// FailStatic: too many would go down at once, so every checked
	// backend keeps its live health.
	FailStatic bool
	// Waiting: a backend's fall waits for the others' next results, so
	// every result should wake the loop.
	Waiting bool
}

// judgeHealth decides the health a config's table is built with, from what
// the checks found (views, by targetKey) and what the live table holds
// (live; nil if none). It is fail-static: where more than fraction of the
// table's checked backends would go down at once, or all of them would,
// the table keeps its live health, the checker being the likelier
// failure. A backend counts as going down when it is up in the live table
// and its checks' dampened state is down or its last check failed: the
// checks of a partitioned director fail at jittered times, and it is
// their last results together, not the dampened flips one by one, that
// show it. And a backend goes down only once every other one has been
// checked since it began failing, so that the first to fall in a
// partition does not go alone.
func judgeHealth(tc *table.TableConfig, live *table.Table, views map[string]checkView, fraction float64) healthDecision {
	bs := append([]table.Backend(nil), tc.Backends...)
	checked, failing, goingDown, wantDown := 0, 0, 0, 0
	var since time.Time  // when the first backend that would go down began failing
	var oldest time.Time // the oldest result of a backend that passes
	haveOldest := false
	for k, b := range bs {
		if !b.Checked {
			continue
		}
		if b.State == table.StateInactive {
			bs[k].Healthy = false // not checked, so not known to be up
			continue
		}
		v := views[targetKey(b.IP, health.ChecksOf(b.Healthchecks))]
		was, inLive := table.HealthOf(live, b.IP)
		checked++
		if !v.up || !v.ok {
			failing++
			if inLive && was {
				goingDown++
			}
		}
		if inLive && was && !v.up && !v.ok {
			wantDown++
			if since.IsZero() || v.failingSince.Before(since) {
				since = v.failingSince
			}
		}
		if v.up && v.ok && (!haveOldest || v.checkedAt.Before(oldest)) {
			oldest, haveOldest = v.checkedAt, true
		}
		bs[k].Healthy = v.up
		if inLive && was && v.ok {
			// Passing again on its way up (after fail-static kept it): a
			// backend whose last check passed is not taken down.
			bs[k].Healthy = true
		}
	}
	d := healthDecision{Backends: bs}
	d.FailStatic = wantDown > 0 && (float64(goingDown) > fraction*float64(checked) || failing == checked)
	fresh := wantDown == 0 || !haveOldest || !oldest.Before(since)
	d.Waiting = !fresh
	if d.FailStatic || !fresh {
		for k, b := range bs {
			if was, ok := table.HealthOf(live, b.IP); ok && b.Checked && b.State != table.StateInactive {
				bs[k].Healthy = was
			}
		}
	}
	return d
}

// failStaticWhy says what the last results of a fail-static table's checks
// point at. When the backends' GUE checks pass, the director reaches them
// through the tunnel, so it is the services on them that fail (a bad
// deploy, say), not the director's network; otherwise the director's own
// probe path is the likelier failure.
func failStaticWhy(results [][]health.Result) string {
	gueOK, gueFailed, otherFailed := false, false, false
	for _, rs := range results {
		for _, r := range rs {
			switch {
			case r.Kind == health.GUE && r.OK:
				gueOK = true
			case r.Kind == health.GUE:
				gueFailed = true
			case !r.OK:
				otherFailed = true
			}
		}
	}
	if gueOK && !gueFailed && otherFailed {
		return "The GUE checks pass, so the director reaches the backends through the tunnel: it is their services that fail " +
			"their checks (a bad deploy?). Check the backends."
	}
	return "The director's own probe path is the likelier failure. Check the director's network."
}
