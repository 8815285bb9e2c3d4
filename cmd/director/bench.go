package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"time"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/table"
	"github.com/director/director/table/bindmap"
)

// benchDoc is bench's JSON document (docs/replay.md, "bench --json").
type benchDoc struct {
	Version int    `json:"version"`
	Capture string `json:"capture"`
	Frames  int    `json:"frames"` // the capture's frames that can be injected
	Mode    string `json:"mode"`
	// Director is the whole capture through the program; Paths the same
	// by the path each frame takes through it. Each run reports the
	// program's own time and the distinct frames it was given.
	Director benchRun       `json:"director"`
	Paths    []benchPath    `json:"paths"`
	Baseline benchRun       `json:"baseline"`
	Counters map[string]any `json:"counters"`
}

// benchRun is a testrun.Measurement, named for the document.
type benchRun struct {
	Seconds        float64 `json:"seconds"`
	Runs           uint64  `json:"runs"`            // times the program ran
	PacketsPerSec  float64 `json:"packets_per_sec"` // runs per second: the generator's rate, not the director's capacity
	NsPerPacket    float64 `json:"ns_per_packet"`   // the program's own time, from BPF run-time statistics
	DistinctFrames int     `json:"distinct_frames"` // how many of the frames it was given were sent at least once
	Injector       string  `json:"injector"`        // how frames were injected (testrun.Rig.Injector)
}

// benchPath is the frames of a capture that take one path through the
// program: steered from the exact table (exact binds, and prefix and
// port-range binds small enough to be spelled out into it), from the group
// table or the trie (path prefix_range: the prefix and port-range binds
// that are not), or passed.
type benchPath struct {
	Path   string   `json:"path"` // exact, prefix_range or passed
	Frames int      `json:"frames"`
	Run    benchRun `json:"run"`
}

var benchCmd = &command{
	name: "bench", args: "CAPTURE --config CONFIG [--director-config FILE] [--duration D] [--mode native|generic] [--json]",
	uses:    usesDirectorConfig,
	summary: "Measure the program's cost per packet on a capture, on a veth pair.",
	help: "Replay a capture at line rate through the real datapath: in a private network namespace, the\n" +
		"program is attached to one end of a veth pair and the capture's frames are injected into the other\n" +
		"end (native: BPF_PROG_RUN in live-frames mode redirecting them, or before Linux 5.18 sendmmsg on\n" +
		"a packet socket, slower; generic: the socket), looping for the duration. Then the\n" +
		"same for an empty XDP_TX program. Reports packets/s, verdicts and the program's cost per packet.\n" +
		"Everything is torn down on every exit path, Ctrl-C included.",
	run: runBench,
}

func runBench(e *env, c *command, args []string) error {
	fs := e.flags(c)
	cfgPath := fs.String("config", "", "forwarding-table `CONFIG` (required)")
	duration := durationFlag(fs, "duration", 5*time.Second, "how long to inject traffic into each program: a `DURATION` such as 5s")
	mode := fs.String("mode", loader.ModeNative, "XDP `MODE` on the veth: native or generic")
	asJSON := fs.Bool("json", false, "print a JSON document")
	pos, err := e.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *cfgPath == "" {
		return errors.New("bench: --config CONFIG is required")
	}
	if *mode != loader.ModeNative && *mode != loader.ModeGeneric {
		return fmt.Errorf("bench: --mode %q: want native or generic", *mode)
	}
	src, err := loadForApply(e, *cfgPath, nil)
	if err != nil {
		return err
	}
	tables := src.Tables
	frames, err := readFrames(pos[0])
	if err != nil {
		return err
	}
	dc, gw, err := e.replayDirectorConfig()
	if err != nil {
		return err
	}
	doc := &benchDoc{Version: 1, Capture: pos[0], Frames: len(frames), Mode: *mode, Paths: []benchPath{}}
	paths := splitByPath(model.New(*dc, [6]byte(gw), tables), tables, frames)
	err = benchAll(doc, dc, gw, tables, frames, paths, *duration)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if *asJSON {
		return writeJSON(e.stdout, doc)
	}
	printBench(e.stdout, doc)
	return nil
}

// benchAll runs the frames through a private director on a veth pair in a
// namespace of its own, then each path's frames on their own where the
// capture takes more than one, then through the empty program, into doc.
// Ctrl-C ends the run being made.
func benchAll(doc *benchDoc, dc *table.DirectorConfig, gw net.HardwareAddr, tables []*table.Table, frames [][]byte, paths []pathFrames,
	duration time.Duration) error {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt)
	defer signal.Stop(stop)
	return testrun.InNetns(func() error {
		c := *dc
		c.GatewayMAC = gw
		d, err := loader.Private(&c, tables)
		if err != nil {
			return err
		}
		defer d.Close()
		base, err := testrun.Baseline()
		if err != nil {
			return err
		}
		defer base.Close()
		before, err := d.GlobalCounters()
		if err != nil {
			return err
		}
		m, err := testrun.Measure(d.Prog, frames, doc.Mode, duration, stop)
		if err != nil {
			return err
		}
		doc.Director = benchRun(m)
		after, err := d.GlobalCounters()
		if err != nil {
			return err
		}
		doc.Counters = map[string]any{}
		for i, n := range loader.CounterNames() {
			doc.Counters[n] = after[i] - before[i]
		}
		// Each path on its own, when the capture takes more than one.
		for _, p := range paths {
			if len(p.frames) == 0 || len(p.frames) == len(frames) {
				continue
			}
			m, err := testrun.Measure(d.Prog, p.frames, doc.Mode, duration, stop)
			if err != nil {
				return err
			}
			doc.Paths = append(doc.Paths, benchPath{Path: p.name, Frames: len(p.frames), Run: benchRun(m)})
		}
		m, err = testrun.Measure(base, frames, doc.Mode, duration, stop)
		doc.Baseline = benchRun(m)
		return err
	})
}

// readFrames loads a capture's frames for injection (14 bytes up to the
// generator's 1536: a veth's 1500-byte MTU plus its L2 header).
func readFrames(path string) ([][]byte, error) {
	r, err := pcapfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer r.Close()
	var frames [][]byte
	var rerr error
	gerr := r.Guard(func() {
		for {
			p, err := r.Read()
			if err == io.EOF {
				return
			}
			if err != nil {
				rerr = err
				return
			}
			if len(p.Frame) >= 14 && len(p.Frame) <= 1518 {
				frames = append(frames, p.Frame)
			}
		}
	})
	if rerr == nil {
		rerr = gerr
	}
	if rerr != nil {
		return nil, fmt.Errorf("bench: %s: %w; %d packets read", path, rerr, r.Count())
	}
	if len(frames) == 0 {
		return nil, fmt.Errorf("bench: %s has no frames to inject", path)
	}
	return frames, nil
}

type pathFrames struct {
	name   string
	frames [][]byte
}

// splitByPath sorts frames by the path they take through the program, as
// the model and the compiled binds say: the exact table (exact binds, and
// the prefix and port-range binds spelled out into it: bindmap.ExactPoints),
// the group table (the other prefixes and port ranges, echo requests) or
// the trie, or passed.
func splitByPath(m *model.Datapath, tables []*table.Table, frames [][]byte) []pathFrames {
	refs := table.Refs(tables)
	type key struct {
		proto uint8
		addr  netip.Addr
		port  uint16
	}
	exact := map[key]bool{}
	for _, p := range bindmap.ExactPoints(refs, bindmap.Compile(refs), bindmap.Groups(refs), true) {
		exact[key{uint8(p.Proto), p.Addr, p.Port}] = true
	}
	out := []pathFrames{{name: "exact"}, {name: "prefix_range"}, {name: "passed"}}
	for _, f := range frames {
		r := m.Classify(f)
		i := 2
		if r.Verdict == model.XDPTX {
			i = 1
			if exact[key{r.Proto, r.VIP, r.VIPPort}] {
				i = 0
			}
		}
		out[i].frames = append(out[i].frames, f)
	}
	return out
}

func printBench(w io.Writer, d *benchDoc) {
	fmt.Fprintf(w, "bench %s: %d frames, %s XDP on a veth pair, injected by %s\n", d.Capture, d.Frames, d.Mode, d.Director.Injector)
	fmt.Fprintf(w, "program cost above an empty XDP_TX program (its %.1f ns/packet), from BPF run-time statistics:\n", d.Baseline.NsPerPacket)
	line := func(what string, r benchRun, frames int) {
		fmt.Fprintf(w, "  %-20s %7.1f ns/packet   %d of %d frames sent\n", what, r.NsPerPacket-d.Baseline.NsPerPacket, r.DistinctFrames, frames)
	}
	line("all frames", d.Director, d.Frames)
	for _, p := range d.Paths {
		line(map[string]string{"exact": "exact table", "prefix_range": "group table/trie", "passed": "passed"}[p.Path], p.Run, p.Frames)
	}
	if d.Director.DistinctFrames < d.Frames {
		fmt.Fprintf(w, "  (the generator holds %d frames at a time: a longer capture is sent in windows, as many as --duration allows)\n",
			testrun.TrafficgenMaxFrames)
	}
	fmt.Fprintf(w, "generator: %.0f packets/s through the director, %.0f through the empty program over %.1fs each\n",
		d.Director.PacketsPerSec, d.Baseline.PacketsPerSec, d.Director.Seconds)
	fmt.Fprintln(w, "  (the rate this machine generates at, not the director's capacity)")
	fmt.Fprintln(w, "  director verdicts:")
	for _, n := range loader.CounterNames() {
		if v, ok := d.Counters[n].(uint64); ok && v > 0 {
			fmt.Fprintf(w, "    %-20s %12d\n", n, v)
		}
	}
}
