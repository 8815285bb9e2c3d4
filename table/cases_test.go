package table

import "os"

// cases is how many of a property test's n random cases run: all of them
// under make test (DIRECTOR_PROPERTY_TESTS=full), a third in a plain go
// test ./table/... (quick, for the work at hand), and under the race
// detector a fifth of either (raceRuns); at least one.
func cases(n int) int {
	if os.Getenv("DIRECTOR_PROPERTY_TESTS") != "full" {
		n /= 3
	}
	return max(1, n/raceRuns)
}
