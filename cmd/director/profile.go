package main

import (
	"os"
	"runtime/pprof"
)

// DIRECTOR_CPUPROFILE=FILE writes a Go CPU profile of the command, for
// finding where replay and build spend their time.
func startProfile() func() {
	path := os.Getenv("DIRECTOR_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
