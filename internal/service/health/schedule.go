package health

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Scheduler runs a check of every target every Interval: each target's
// first check at a random point of the first interval and later ones an
// interval apart give or take a tenth, so that a thousand backends are not
// probed in lockstep; at most Limit checks run at once. The schedule is
// fixed from each check's planned start, not from its end, so a check that
// takes its whole timeout does not slow its target's rate; one that takes
// longer than an interval is followed at once, and the schedule goes on
// from there rather than catching up.
type Scheduler struct {
	Interval time.Duration
	Limit    int
	Seed     uint64 // of the jitter; tests fix it
}

// FirstDelays spreads n targets' first checks over one interval, at random.
func FirstDelays(n int, interval time.Duration, r *rand.Rand) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(r.Int64N(int64(interval)))
	}
	return out
}

// NextDelay is the time from a check to the target's next: the interval,
// give or take up to a tenth of it.
func NextDelay(interval time.Duration, r *rand.Rand) time.Duration {
	tenth := int64(interval / 10)
	if tenth == 0 {
		return interval
	}
	return interval + time.Duration(r.Int64N(2*tenth+1)-tenth)
}

// Run checks each of n targets (by index) until ctx ends, then waits for
// the checks under way.
func (s *Scheduler) Run(ctx context.Context, n int, check func(ctx context.Context, target int)) {
	limit := s.Limit
	if limit <= 0 {
		limit = 1
	}
	sem := make(chan struct{}, limit)
	r := rand.New(rand.NewPCG(s.Seed, 0x9e3779b97f4a7c15))
	first := FirstDelays(n, s.Interval, r)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		seed := r.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			next := time.Now().Add(first[i])
			t := time.NewTimer(first[i])
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				select {
				case <-ctx.Done():
					return
				case sem <- struct{}{}:
				}
				check(ctx, i)
				<-sem
				next = next.Add(NextDelay(s.Interval, r))
				now := time.Now()
				if next.Before(now) {
					next = now
				}
				t.Reset(next.Sub(now))
			}
		}()
	}
	wg.Wait()
}
