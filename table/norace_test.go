//go:build !race

package table

const raceRuns = 1
