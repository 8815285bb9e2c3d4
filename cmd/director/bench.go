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

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/director/director/internal/testnet"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/capture"
	"github.com/director/director/table/model"
)

// benchDoc is bench's JSON document (README, "bench --json").
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

type benchRun struct {
	Seconds        float64 `json:"seconds"`
	Runs           uint64  `json:"runs"`            // times the program ran
	PacketsPerSec  float64 `json:"packets_per_sec"` // runs per second: the generator's rate, not the director's capacity
	NsPerPacket    float64 `json:"ns_per_packet"`   // the program's own time, from BPF run-time statistics
	DistinctFrames int     `json:"distinct_frames"` // how many of the frames it was given were sent at least once
}

// benchPath is the frames of a capture that take one path through the
// program: steered by an exact bind (one address, one port: the hash
// table), by a prefix or port-range bind (the trie), or passed.
type benchPath struct {
	Path   string   `json:"path"` // exact, prefix_range or passed
	Frames int      `json:"frames"`
	Run    benchRun `json:"run"`
}

var benchCmd = &command{
	name: "bench", args: "CAPTURE --config CONFIG [--duration D] [--mode native|generic] [--json]",
	summary: "Measure the program's cost per packet on a capture, on a veth pair.",
	help: "Replay a capture at line rate through the real datapath: in a private network namespace, the\n" +
		"program is attached to one end of a veth pair and the capture's frames are injected into the other\n" +
		"end (native: BPF_PROG_RUN in live-frames mode redirecting them; generic: sendmmsg on a packet\n" +
		"socket), looping for the duration. Then the\n" +
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
	src, err := loadForApply(e, *cfgPath)
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
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt)
	defer signal.Stop(stop)
	err = testnet.InNetns(func() error {
		rp, err := loader.NewReplayer(dc, gw, tables)
		if err != nil {
			return err
		}
		defer rp.Close()
		base, err := loader.Baseline()
		if err != nil {
			return err
		}
		defer base.Close()
		before, err := rp.D.GlobalCounters()
		if err != nil {
			return err
		}
		if doc.Director, err = benchProgram(rp.D.Prog, frames, *mode, *duration, stop); err != nil {
			return err
		}
		after, err := rp.D.GlobalCounters()
		if err != nil {
			return err
		}
		doc.Counters = map[string]any{}
		for i, n := range loader.CounterNames {
			doc.Counters[n] = after[i] - before[i]
		}
		// Each path on its own, when the capture takes more than one.
		for _, p := range paths {
			if len(p.frames) == 0 || len(p.frames) == len(frames) {
				continue
			}
			run, err := benchProgram(rp.D.Prog, p.frames, *mode, *duration, stop)
			if err != nil {
				return err
			}
			doc.Paths = append(doc.Paths, benchPath{Path: p.name, Frames: len(p.frames), Run: run})
		}
		doc.Baseline, err = benchProgram(base, frames, *mode, *duration, stop)
		return err
	})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if *asJSON {
		return writeJSON(e.stdout, doc)
	}
	printBench(e.stdout, doc)
	return nil
}

// readFrames loads a capture's frames for injection (14 bytes up to the
// generator's 1536: a veth's 1500-byte MTU plus its L2 header).
func readFrames(path string) ([][]byte, error) {
	r, err := capture.Open(path)
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

// perCall is how many frames one BPF_PROG_RUN call sends; a capture larger
// than the generator holds is sent in windows, each cycled windowRepeats
// times.
const (
	perCall       = 1 << 20
	windowRepeats = 64
)

// window is where the w'th window of size frames starts in n frames: the
// windows go round the capture, the last one perhaps short.
func window(w, size, n int) int {
	windows := (n + size - 1) / size
	return (w % windows) * size
}

// benchProgram attaches prog to a fresh veth pair in the current (private)
// namespace and injects frames for d. It runs on the namespace's thread.
func benchProgram(prog *ebpf.Program, frames [][]byte, mode string, d time.Duration, stop chan os.Signal) (benchRun, error) {
	var r benchRun
	if err := testnet.Veth("dir0", "gen0"); err != nil {
		return r, err
	}
	defer func() {
		if l, err := net.InterfaceByName("dir0"); err == nil {
			testnet.DeleteLink(l.Name)
		}
	}()
	dir, _ := net.InterfaceByName("dir0")
	gen, _ := net.InterfaceByName("gen0")
	flags := link.XDPDriverMode
	if mode == loader.ModeGeneric {
		flags = link.XDPGenericMode
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: dir.Index, Flags: flags})
	if err != nil {
		return r, err
	}
	defer l.Close()
	pass, err := loader.PassAll()
	if err != nil {
		return r, err
	}
	defer pass.Close()
	// The generating end needs NAPI to take back what the program transmits.
	pl, err := link.AttachXDP(link.XDPOptions{Program: pass, Interface: gen.Index, Flags: link.XDPDriverMode})
	if err != nil {
		return r, err
	}
	defer pl.Close()
	tg, err := loader.NewTrafficgen()
	if err != nil {
		return r, err
	}
	defer tg.Close()
	stopStats, err := loader.EnableRunStats()
	if err != nil {
		return r, err
	}
	defer stopStats()
	start := time.Now()
	// Windows sent, by their first frame: how much of the capture ran.
	sent := map[int]int{}
	inject := func() error {
		// The generator holds up to TrafficgenMaxFrames frames at a time;
		// a longer capture is sent in windows of that many.
		for w := 0; time.Since(start) < d; w++ {
			lo := window(w, loader.TrafficgenMaxFrames, len(frames))
			hi := min(lo+loader.TrafficgenMaxFrames, len(frames))
			sent[lo] = hi - lo
			if err := tg.Prepare(frames[lo:hi]); err != nil {
				return err
			}
			select {
			case <-stop:
				return errors.New("interrupted")
			default:
			}
			// Each call costs milliseconds to set up, so it sends many
			// frames: a window is cycled through windowRepeats times.
			n := uint32(perCall)
			if len(frames) > loader.TrafficgenMaxFrames {
				n = uint32(hi-lo) * windowRepeats
			}
			if err := tg.Run(gen.Index, n); err != nil {
				return err
			}
		}
		return nil
	}
	if mode == loader.ModeGeneric {
		// Redirected frames only reach a veth whose peer runs native XDP;
		// generic XDP sees the stack's packets, so send through a packet
		// socket, in sendmmsg batches.
		inject = func() error {
			sock, err := testnet.Listen("gen0")
			if err != nil {
				return err
			}
			defer sock.Close()
			for w := 0; time.Since(start) < d; w++ {
				select {
				case <-stop:
					return errors.New("interrupted")
				default:
				}
				lo := window(w, 4096, len(frames))
				sent[lo] = min(lo+4096, len(frames)) - lo
				if err := sock.SendBatch(frames[lo:min(lo+4096, len(frames))]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	cost, err := loader.MeasureCost(prog, inject)
	if err != nil {
		return r, err
	}
	r.Seconds = time.Since(start).Seconds()
	for _, n := range sent {
		r.DistinctFrames += n
	}
	r.Runs = cost.Runs
	r.PacketsPerSec = float64(cost.Runs) / r.Seconds
	if cost.Runs > 0 {
		r.NsPerPacket = float64(cost.Runtime.Nanoseconds()) / float64(cost.Runs)
	}
	return r, nil
}

type pathFrames struct {
	name   string
	frames [][]byte
}

// splitByPath sorts frames by the path they take through the program, as
// the model and the compiled binds say: the exact-bind hash table, the
// prefix and port-range trie, or passed.
func splitByPath(m *model.Datapath, tables []*table.Table, frames [][]byte) []pathFrames {
	var refs []table.BindRef
	for i, t := range tables {
		for _, b := range t.Binds {
			refs = append(refs, table.BindRef{Table: i, Bind: b})
		}
	}
	type key struct {
		proto uint8
		addr  netip.Addr
		port  uint16
	}
	exact := map[key]bool{}
	for _, e := range table.CompileBinds(refs) {
		if e.Exact {
			exact[key{uint8(e.Proto), e.Prefix.Addr(), e.Port}] = true
		}
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
	fmt.Fprintf(w, "bench %s: %d frames, %s XDP on a veth pair\n", d.Capture, d.Frames, d.Mode)
	fmt.Fprintf(w, "program cost above an empty XDP_TX program (its %.1f ns/packet), from BPF run-time statistics:\n", d.Baseline.NsPerPacket)
	line := func(what string, r benchRun, frames int) {
		fmt.Fprintf(w, "  %-20s %7.1f ns/packet   %d of %d frames sent\n", what, r.NsPerPacket-d.Baseline.NsPerPacket, r.DistinctFrames, frames)
	}
	line("all frames", d.Director, d.Frames)
	for _, p := range d.Paths {
		line(map[string]string{"exact": "exact binds", "prefix_range": "prefix/range binds", "passed": "passed"}[p.Path], p.Run, p.Frames)
	}
	if d.Director.DistinctFrames < d.Frames {
		fmt.Fprintf(w, "  (the generator holds %d frames at a time: a longer capture is sent in windows, as many as --duration allows)\n",
			loader.TrafficgenMaxFrames)
	}
	fmt.Fprintf(w, "generator: %.0f packets/s through the director, %.0f through the empty program over %.1fs each\n",
		d.Director.PacketsPerSec, d.Baseline.PacketsPerSec, d.Director.Seconds)
	fmt.Fprintln(w, "  (the rate this machine generates at, not the director's capacity)")
	fmt.Fprintln(w, "  director verdicts:")
	for _, n := range loader.CounterNames {
		if v, ok := d.Counters[n].(uint64); ok && v > 0 {
			fmt.Fprintf(w, "    %-20s %12d\n", n, v)
		}
	}
}
