package main

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"

	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

var buildCmd = &command{
	name: "build", args: "CONFIG -o FILE [--format glb]",
	summary: "Build a config's tables and write them in GLB's binary format.",
	help:    "Build a config's forwarding tables and write them in GLB's binary format.",
	run:     runBuild,
}

// buildGCPercent is GOGC during a build.
const buildGCPercent = 400

func runBuild(e *env, c *command, args []string) error {
	fs := e.flags(c)
	out := fs.String("o", "", "output `FILE`, written atomically (temporary file and rename); - for stdout")
	format := fs.String("format", "glb", "output `FORMAT`: glb (GLB's binary table format v2)")
	pos, err := e.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *out == "" {
		return errors.New("build: -o FILE is required")
	}
	if *format != "glb" {
		return fmt.Errorf("build: --format %q unknown (supported: glb)", *format)
	}
	// A build is one burst of allocation, about 5 MB a table, that the
	// process exits after. At the default GOGC a 256-backend table's build
	// collects garbage once, which takes a CPU from the scores for 3-4 ms
	// of its 46. Five times the live heap (16 MB at least) leaves a
	// one-table build none, and a larger config's memory still bounded.
	defer debug.SetGCPercent(debug.SetGCPercent(buildGCPercent))
	src, err := config.Load(pos[0])
	if err != nil {
		return err
	}
	if src.Binary {
		return fmt.Errorf("build: %s is already a GLB binary table; build takes a JSON config", pos[0])
	}
	warnAll(e, pos[0], src.Warnings)
	for i, t := range src.Tables {
		if t.QUIC.On() {
			fmt.Fprintf(e.stderr, "director: warning: %s: %s: GLB's binary format has no place for its quic block and server IDs: "+
				"whatever reads the file routes the table's QUIC by rows (its fingerprint below is the config's)\n", pos[0], tableLabel(t, i))
		}
	}
	// The fingerprints (SHA-256 over 2 MB a table) are computed while the
	// file is written and synced, rather than after.
	var fps sync.WaitGroup
	for _, t := range src.Tables {
		fps.Go(func() { table.Fingerprint(t) })
	}
	err = e.writeOutput(*out, 0o600, func(w io.Writer) error { return table.WriteGLB(w, src.Tables) })
	fps.Wait()
	if err != nil {
		return fmt.Errorf("build: writing %s: %w", wrote(*out), err)
	}
	r := e.reportTo(*out)
	fmt.Fprintf(r.stdout, "wrote %s: %d tables\n", wrote(*out), len(src.Tables))
	for i, t := range src.Tables {
		fmt.Fprintf(r.stdout, "  %s  fingerprint %s\n", tableLabel(t, i), table.ShortFingerprint(table.Fingerprint(t)))
	}
	return nil
}
