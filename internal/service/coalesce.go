package service

import "time"

// coalescer decides when changes are applied. A change that arrives when
// nothing was applied for a window is applied at once, so a lone health
// flip reaches the kernel without waiting; changes that arrive within a
// window of an apply wait until the window has passed and go together, in
// one apply. A burst (a rack losing power, an edited config) so costs at
// most two applies per window, and a single change costs no delay.
type coalescer struct {
	window time.Duration
	last   time.Time // when the last apply finished
	due    time.Time // when the waiting changes are to be applied; zero when none wait
}

// change records a change at now and says how long to wait before
// applying it (0: at once). A change that joins waiting ones returns the
// same due time.
func (c *coalescer) change(now time.Time) time.Duration {
	if !c.due.IsZero() {
		return max(c.due.Sub(now), 0)
	}
	if c.last.IsZero() || now.Sub(c.last) >= c.window {
		c.due = now
		return 0
	}
	c.due = c.last.Add(c.window)
	return c.due.Sub(now)
}

// applied records an apply that finished at now, taking every waiting
// change with it.
func (c *coalescer) applied(now time.Time) {
	c.last, c.due = now, time.Time{}
}
