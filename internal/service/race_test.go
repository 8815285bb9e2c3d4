//go:build race

package service

// raceRuns is how much of a property test's random cases run under the
// race detector: the races are in how goroutines meet, which a few cases
// show as well as many, and the whole set runs without it (make test runs
// both).
const raceRuns = 5
