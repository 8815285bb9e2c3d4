package main

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

var buildCmd = &command{
	name: "build", args: "CONFIG -o FILE [--format glb]",
	summary: "Build a config's tables and write them in GLB's binary format.",
	help:    "Build a config's forwarding tables and write them in GLB's binary format.",
	run:     runBuild,
}

// errStopped stops a build whose output failed.
var errStopped = errors.New("stopped: the output failed")

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
	// one-table build none; tables are built, written and let go one at a
	// time, so that the live heap, and so memory, stays that of a few
	// tables however many there are.
	defer debug.SetGCPercent(debug.SetGCPercent(buildGCPercent))
	data, err := config.ReadInput(pos[0], table.ToolLimit)
	if err != nil {
		return err
	}
	if table.IsGLBBinary(data) {
		return fmt.Errorf("build: %s is already a GLB binary table; build takes a JSON config", pos[0])
	}
	cfg, err := config.ParseConfigSource(pos[0], data, table.ToolLimit)
	if err != nil {
		return err
	}
	var labels, fps []string
	var warnings []string
	err = e.writeOutput(*out, 0o600, func(w io.Writer) error {
		gw := table.NewGLBWriter(w, len(cfg.Tables))
		// The next table is built while this one is fingerprinted (SHA-256
		// over 2 MB) and written.
		ch := make(chan *table.Table, 1)
		var werr error
		var failed atomic.Bool // werr is set: building more is wasted
		done := make(chan struct{})
		go func() {
			defer close(done)
			for t := range ch {
				if werr != nil {
					continue
				}
				var fp sync.WaitGroup
				fp.Go(func() { table.Fingerprint(t) })
				werr = gw.Write(t)
				fp.Wait()
				if werr != nil {
					failed.Store(true)
				}
				labels = append(labels, tableLabel(t, len(labels)))
				fps = append(fps, table.ShortFingerprint(table.Fingerprint(t)))
			}
		}()
		var berr error
		warnings, berr = config.BuildEach(pos[0], cfg, func(i int, t *table.Table) error {
			if failed.Load() {
				return errStopped
			}
			ch <- t
			return nil
		})
		close(ch)
		<-done
		if werr != nil {
			return werr
		}
		if berr != nil {
			return berr
		}
		return gw.Close()
	})
	if err != nil {
		var fe *config.FileError
		if errors.As(err, &fe) {
			return err // the config's, naming its place
		}
		return fmt.Errorf("build: writing %s: %w", wrote(*out), err)
	}
	warnAll(e, pos[0], warnings)
	for i := range cfg.Tables {
		if cfg.Tables[i].QUIC.On() {
			fmt.Fprintf(e.stderr, "director: warning: %s: %s: GLB's binary format has no place for its quic block and server IDs: "+
				"whatever reads the file routes the table's QUIC by rows (its fingerprint below is the config's)\n", pos[0], labels[i])
		}
	}
	r := e.reportTo(*out)
	fmt.Fprintf(r.stdout, "wrote %s: %d tables\n", wrote(*out), len(cfg.Tables))
	for i := range labels {
		fmt.Fprintf(r.stdout, "  %s  fingerprint %s\n", labels[i], fps[i])
	}
	return nil
}
