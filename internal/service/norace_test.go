//go:build !race

package service

const raceRuns = 1
