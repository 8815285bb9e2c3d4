package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/director/director/internal/capture"
	"github.com/director/director/internal/classify"
	"github.com/director/director/internal/gue"
	"github.com/director/director/internal/model"
	"github.com/director/director/internal/replay"
	"github.com/director/director/loader"
	"github.com/director/director/loader/lab"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// replayGateway is the gateway MAC replays use when no director config
// gives one: the frames never leave the process.
var replayGateway = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}

var replayCmd = &command{
	uses: usesDirectorConfig,
	name: "replay", args: "CAPTURE --config CONFIG [--director-config FILE] [--against NEW] [--json] [--verify] [--model] [--hot N]",
	summary: "Run a capture through the real program, or the model, and report where it goes.",
	help: "Run every packet of a capture (pcap or pcapng) through the real XDP program with BPF_PROG_RUN, in a\n" +
		"private instance that never touches the live director, and report where the traffic goes: verdicts,\n" +
		"pass reasons, packets, bytes and flows per table and backend, the hottest rows. --against NEW shows\n" +
		"what NEW would do to those flows. --verify checks every packet against the Go model; --model runs the\n" +
		"model alone (no kernel needed).",
	run: runReplay,
}

func runReplay(e *env, c *command, args []string) error {
	fs := e.flags(c)
	cfgPath := fs.String("config", "", "forwarding-table `CONFIG` to replay against (required)")
	against := fs.String("against", "", "a second config `NEW`: where would the capture's flows go")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verify := fs.Bool("verify", false, "also run every packet through the Go model and require identical verdicts and bytes")
	modelOnly := fs.Bool("model", false, "use only the Go model (no BPF, no root)")
	hot := fs.Int("hot", 10, "list the `N` busiest rows")
	pos, err := e.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *cfgPath == "" {
		return errors.New("replay: --config CONFIG is required")
	}
	if *modelOnly && *verify {
		return errors.New("replay: --verify compares the kernel with the model; it cannot go with --model")
	}
	rp, err := newReplay(e, *cfgPath, *against, *modelOnly)
	if err != nil {
		return err
	}
	defer rp.close()
	rep, runErr := rp.run(e, pos[0], *verify, *hot)
	if rep != nil {
		if *asJSON {
			if err := writeJSON(e.stdout, rep); err != nil {
				return err
			}
		} else {
			printReplay(e.stdout, rep)
		}
	}
	if runErr != nil {
		return runErr
	}
	if rep.Verify != nil && rep.Verify.Mismatches > 0 {
		return fmt.Errorf("replay: %d packets differ between the kernel and the model", rep.Verify.Mismatches)
	}
	return nil
}

type side struct {
	path    string
	tables  []*table.Table
	model   *model.Datapath
	private *loader.Director // the private instance the kernel runs
	kernel  *lab.Replayer
	cls     []*classify.Classifier // the model's, one per worker
}

type replayer struct {
	dc        table.DirectorConfig
	gw        [6]byte
	cur, new  *side
	modelOnly bool
	verify    bool
}

func (e *env) replayDirectorConfig() (*table.DirectorConfig, net.HardwareAddr, error) {
	if e.dirConfig == "" {
		dc := table.DefaultDirectorConfig()
		dc.SrcIP = netip.MustParseAddr("192.0.2.1")
		return &dc, replayGateway, nil
	}
	dc, err := config.ParseDirectorFile(e.dirConfig)
	if err != nil {
		return nil, nil, err
	}
	gw := dc.GatewayMAC
	if gw == nil {
		gw = replayGateway
	}
	return dc, gw, nil
}

func newReplay(e *env, cfgPath, againstPath string, modelOnly bool) (*replayer, error) {
	dc, gw, err := e.replayDirectorConfig()
	if err != nil {
		return nil, err
	}
	rp := &replayer{dc: *dc, modelOnly: modelOnly}
	copy(rp.gw[:], gw)
	// The program is loaded (the verifier's work) while the tables are
	// built, and served while it is verified: start-up is the longest of
	// the three, not their sum.
	c := *dc
	c.GatewayMAC = gw
	type loaded struct {
		d   *loader.Director
		err error
	}
	errNoTables := errors.New("no tables") // the config was refused; its error is reported
	preload := func() (chan<- []*table.Table, <-chan loaded) {
		tables := make(chan []*table.Table, 1)
		ch := make(chan loaded, 1)
		if !modelOnly {
			go func() {
				d, err := loader.LoadServing(func(d *loader.Director) error {
					t, ok := <-tables
					if !ok {
						return errNoTables
					}
					return d.Serve(&c, t)
				})
				ch <- loaded{d, err}
			}()
		}
		return tables, ch
	}
	load := func(path string, tablesTo chan<- []*table.Table, pre <-chan loaded) (*side, error) {
		src, err := loadForApply(e, path, nil)
		if err != nil {
			close(tablesTo)
			if !modelOnly {
				if l := <-pre; l.d != nil {
					l.d.Close()
				}
			}
			return nil, err
		}
		tables := src.Tables
		s := &side{path: path, tables: tables, model: model.New(*dc, rp.gw, tables)}
		if !modelOnly {
			tablesTo <- tables
			l := <-pre
			if s.private, s.kernel, err = privateReplayer(l.d, l.err); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	type pending struct {
		tables chan<- []*table.Table
		loaded <-chan loaded
	}
	sides := 1
	if againstPath != "" {
		sides = 2
	}
	var pres []pending
	for range sides {
		t, l := preload()
		pres = append(pres, pending{t, l})
	}
	if rp.cur, err = load(cfgPath, pres[0].tables, pres[0].loaded); err != nil {
		if sides > 1 {
			close(pres[1].tables)
			if !modelOnly {
				if l := <-pres[1].loaded; l.d != nil {
					l.d.Close()
				}
			}
		}
		return nil, err
	}
	if againstPath != "" {
		if rp.new, err = load(againstPath, pres[1].tables, pres[1].loaded); err != nil {
			rp.close()
			return nil, err
		}
	}
	return rp, nil
}

func (rp *replayer) close() {
	for _, s := range []*side{rp.cur, rp.new} {
		if s != nil && s.private != nil {
			s.private.Close()
		}
	}
}

// privateReplayer makes a replayer running frames through d, the private
// director loaded (with err) to serve a side's tables.
func privateReplayer(d *loader.Director, err error) (*loader.Director, *lab.Replayer, error) {
	if errors.Is(err, unix.EPERM) {
		// Not cilium/ebpf's hint about MEMLOCK: privileges are missing.
		return nil, nil, errors.New("replay: running the XDP program in the kernel (BPF_PROG_RUN) needs root, or CAP_BPF " +
			"and CAP_NET_ADMIN; --model replays through the Go model and needs neither")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	r, err := lab.NewReplayer(d.Prog, d.Maps.Counters)
	if err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	return d, r, nil
}

// replayBatch is how many packets go through the stages (read, run,
// aggregate) at a time. Small enough that the first batch's read and the
// last one's aggregation, which nothing overlaps, are short; 2,048 was
// fastest of 1,024 to 16,384 on a 100,000-packet capture.
const replayBatch = 1 << 11

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// run replays the capture. On a capture error it still returns the report
// of what was processed, with the error.
func (rp *replayer) run(e *env, path string, verify bool, hot int) (*replay.Report, error) {
	rp.verify = verify
	r, err := capture.Open(path)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer r.Close()
	names := make([]string, len(rp.cur.tables))
	for i, t := range rp.cur.tables {
		names[i] = t.Name
	}
	agg := replay.NewAggregator(path, r.FileFormat, names, loader.CounterNames())
	var vr *replay.VerifyReport
	if verify {
		vr = &replay.VerifyReport{First: []replay.Mismatch{}}
	}
	progress := isTerminal(e.stderr)
	start, last := time.Now(), time.Now()
	if rp.modelOnly {
		var readErr error
		var nw *model.Datapath
		if rp.new != nil {
			nw = rp.new.model
		}
		var read atomic.Uint64
		stop := make(chan struct{})
		if progress {
			go func() {
				t := time.NewTicker(500 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						fmt.Fprintf(e.stderr, "\r%d packets, %.0f/s ", read.Load(), float64(read.Load())/time.Since(start).Seconds())
					}
				}
			}()
		}
		readErr = replay.RunModel(r, path, rp.cur.model, nw, agg, &read)
		close(stop)
		if readErr != nil {
			readErr = fmt.Errorf("replay: %w", readErr)
		}
		return rp.finish(e, agg, nil, start, progress, hot), readErr
	}

	// Three stages overlap: reading the capture, running batches through
	// the program (or the model) on every CPU, and aggregating.
	type job struct {
		batch    []capture.Packet
		cur, new []outcome
		err      error
	}
	var readErr error
	batches := make(chan []capture.Packet, 2)
	go func() {
		defer close(batches)
		// A mapped capture that shrinks faults: an error, not a crash.
		err := r.Guard(func() {
			for {
				batch := make([]capture.Packet, 0, replayBatch)
				for len(batch) < replayBatch {
					p, err := r.Read()
					if err == io.EOF {
						break
					}
					if err != nil {
						readErr = fmt.Errorf("replay: %s: %w; %d packets were processed", path, err, r.Count())
						break
					}
					batch = append(batch, p)
				}
				if len(batch) > 0 {
					batches <- batch
				}
				if readErr != nil || len(batch) < replayBatch {
					return
				}
			}
		})
		if err != nil {
			readErr = fmt.Errorf("replay: %s: %w; %d packets were processed", path, err, r.Count())
		}
	}()
	results := make(chan job, 2)
	go func() {
		defer close(results)
		for batch := range batches {
			j := job{batch: batch}
			j.cur, j.err = rp.runSide(rp.cur, batch)
			if j.err == nil && rp.new != nil {
				j.new, j.err = rp.runSide(rp.new, batch)
			}
			results <- j
			if j.err != nil {
				for range batches { // let the reader finish
				}
				return
			}
		}
	}()
	var runErr error
	for j := range results {
		if j.err != nil {
			runErr = j.err
			continue
		}
		rp.aggregate(j.batch, j.cur, j.new, agg, vr)
		if progress && time.Since(last) > 500*time.Millisecond {
			last = time.Now()
			fmt.Fprintf(e.stderr, "\r%d packets, %.0f/s ", agg.Packets(), float64(agg.Packets())/time.Since(start).Seconds())
		}
	}
	if runErr != nil {
		return nil, runErr
	}
	return rp.finish(e, agg, vr, start, progress, hot), readErr
}

// finish completes the report and says how fast the replay went.
func (rp *replayer) finish(e *env, agg *replay.Aggregator, vr *replay.VerifyReport, start time.Time, progress bool, hot int) *replay.Report {
	elapsed := time.Since(start)
	if progress {
		fmt.Fprint(e.stderr, "\r\033[K")
	}
	if vr != nil {
		agg.SetVerify(vr)
	}
	againstPath := ""
	if rp.new != nil {
		againstPath = rp.new.path
	}
	rep := agg.Report(hot, againstPath)
	engine := "BPF_PROG_RUN"
	if rp.modelOnly {
		engine = "the Go model"
	}
	fmt.Fprintf(e.stderr, "director: replayed %d packets through %s in %s (%.0f packets/s)\n",
		rep.Capture.Packets, engine, elapsed.Round(time.Millisecond), float64(rep.Capture.Packets)/elapsed.Seconds())
	return rep
}

// outcome is one packet's result on one side.
type outcome struct {
	verdict int          // the XDP action
	out     []byte       // the frame as the program left it
	reason  int          // for XDP_PASS: the pass counter, an index in loader.CounterNames(); -1 if none moved
	res     model.Result // the model's view (flow, table, row)
}

func (o *outcome) tx() bool { return o.verdict == model.XDPTX }

func (rp *replayer) runSide(s *side, batch []capture.Packet) ([]outcome, error) {
	out := make([]outcome, len(batch))
	// The model, in parallel: the reference when its bytes are compared,
	// otherwise the fast classifier, one per worker, kept across batches.
	var wg sync.WaitGroup
	n := runtime.GOMAXPROCS(0)
	for len(s.cls) < n {
		s.cls = append(s.cls, classify.New(s.model))
	}
	chunk := (len(batch) + n - 1) / n
	for w := 0; w < n; w++ {
		lo, hi := w*chunk, min((w+1)*chunk, len(batch))
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				if rp.verify {
					out[i].res = s.model.Process(batch[i].Frame)
				} else {
					out[i].res, _ = s.cls[w].Classify(batch[i].Frame)
				}
			}
		}()
	}
	wg.Wait()
	frames := make([][]byte, len(batch))
	for i := range batch {
		frames[i] = batch[i].Frame
	}
	ko := make([]lab.Outcome, len(batch))
	if err := s.kernel.Run(frames, ko); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	for i := range ko {
		out[i].verdict = int(ko[i].Verdict)
		out[i].out = ko[i].Out
		out[i].reason = ko[i].Reason
	}
	return out, nil
}

func sample(p capture.Packet, o outcome) replay.Sample {
	s := replay.Sample{N: p.N, Bytes: len(p.Frame), Verdict: o.verdict, Reason: o.reason, Table: -1}
	if o.res.Parsed {
		s.HasFlow = true
		s.Flow = replay.FlowKey{Client: o.res.Client, VIP: o.res.VIP, ClientPort: o.res.ClientPort, VIPPort: o.res.VIPPort, Proto: o.res.Proto}
	}
	if o.tx() {
		if h, _, err := gue.ParseFrame(o.out); err == nil {
			s.Hops = h.Hops
		}
		if len(s.Hops) > 0 {
			s.Primary = s.Hops[0]
		}
		if o.res.Verdict == model.XDPTX {
			s.Table, s.Row = o.res.Table, o.res.Row
		}
	}
	return s
}

func (rp *replayer) aggregate(batch []capture.Packet, cur, nw []outcome, agg *replay.Aggregator, vr *replay.VerifyReport) {
	for i, p := range batch {
		agg.Captured(len(p.Frame), p.Truncated)
		s := sample(p, cur[i])
		agg.Add(&s)
		if nw != nil {
			s := sample(p, nw[i])
			agg.AddAgainst(&s)
		}
		if vr != nil {
			vr.Compared++
			if desc, same := compare(&cur[i], &cur[i].res); !same {
				vr.Mismatches++
				if len(vr.First) < 5 {
					m := &cur[i].res
					vr.First = append(vr.First, replay.Mismatch{N: p.N, Input: hex.EncodeToString(p.Frame),
						Kernel: hex.EncodeToString(cur[i].out), Model: hex.EncodeToString(m.Out),
						KernelTX: cur[i].tx(), ModelTX: m.Verdict == model.XDPTX,
						KernelVerdict: verdictName(cur[i].verdict, cur[i].reason), ModelVerdict: verdictName(m.Verdict, m.Reason),
						Description: desc})
				}
			}
		}
	}
}

// compare is --verify's judgement of one packet: the kernel and the model
// agree when the verdict, the pass reason and the output bytes are all
// the same. An XDP_ABORTED or XDP_DROP that leaves the bytes alone is a
// disagreement with the model's XDP_PASS, however alike the bytes.
func compare(k *outcome, m *model.Result) (desc string, same bool) {
	// Names are made only for a difference: this runs for every packet.
	switch {
	case !sameVerdict(k.verdict, k.reason, m.Verdict, m.Reason):
		return "kernel " + verdictName(k.verdict, k.reason) + ", model " + verdictName(m.Verdict, m.Reason), false
	case string(k.out) != string(m.Out):
		return verdictName(k.verdict, k.reason) + " by both, different bytes", false
	}
	return "", true
}

// sameVerdict reports whether two verdicts have the same verdictName.
func sameVerdict(v1, r1, v2, r2 int) bool {
	if v1 != v2 {
		return false
	}
	if v1 != model.XDPPass {
		return true
	}
	n := len(loader.CounterNames())
	return r1 == r2 || ((r1 < 0 || r1 >= n) && (r2 < 0 || r2 >= n))
}

// verdictName is an XDP action, with the pass reason for XDP_PASS.
func verdictName(verdict, reason int) string {
	names := [...]string{"XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT"}
	name := fmt.Sprintf("XDP action %d", verdict)
	if verdict >= 0 && verdict < len(names) {
		name = names[verdict]
	}
	if verdict != model.XDPPass {
		return name
	}
	if reason < 0 || reason >= len(loader.CounterNames()) {
		return name + " (no counter)"
	}
	return name + " " + loader.CounterNames()[reason]
}

func printReplay(w io.Writer, r *replay.Report) {
	c := r.Capture
	fmt.Fprintf(w, "capture %s (%s): %d packets, %d bytes", c.File, c.Format, c.Packets, c.Bytes)
	if c.Truncated > 0 {
		fmt.Fprintf(w, ", %d cut short by the snap length", c.Truncated)
	}
	if c.MultiBuffer > 0 {
		fmt.Fprintf(w, ", %d multi-buffer (over %d bytes)", c.MultiBuffer, model.FirstBuffer)
	}
	fmt.Fprintln(w)
	tx, pass := r.Verdicts["tx"], r.Verdicts["pass"]
	fmt.Fprintf(w, "  XDP_TX    %10d packets %12d bytes  %s\n", tx.Packets, tx.Bytes, share(tx.Packets, c.Packets))
	fmt.Fprintf(w, "  XDP_PASS  %10d packets %12d bytes  %s\n", pass.Packets, pass.Bytes, share(pass.Packets, c.Packets))
	for _, v := range []string{"aborted", "drop", "redirect"} {
		if o, ok := r.Verdicts[v]; ok {
			fmt.Fprintf(w, "  XDP_%-8s%10d packets %12d bytes  %s\n", strings.ToUpper(v), o.Packets, o.Bytes, share(o.Packets, c.Packets))
		}
	}
	for _, name := range loader.CounterNames() {
		if rc, ok := r.Reasons[name]; ok {
			fmt.Fprintf(w, "    %-20s %10d packets %12d bytes\n", name, rc.Packets, rc.Bytes)
		}
	}
	fmt.Fprintf(w, "  unmatched (parsed, no bind): %d packets, %d bytes, %d flows\n", r.Unmatched.Packets, r.Unmatched.Bytes, r.Unmatched.Flows)
	for _, t := range r.Tables {
		fmt.Fprintf(w, "\ntable %s: %d packets, %d bytes, %d flows\n", t.Name, t.Packets, t.Bytes, t.Flows)
		var top uint64 = 1
		iw := len("BACKEND")
		for _, b := range t.Backends {
			top = max(top, b.Packets)
			iw = max(iw, len(b.IP))
		}
		fmt.Fprintf(w, "  %-*s %-*s %10s %12s %8s\n", iw, "BACKEND", barWidth+8, "PACKETS", "", "BYTES", "FLOWS")
		for _, b := range t.Backends {
			fmt.Fprintf(w, "  %-*s %s %s %10d %12d %8d\n", iw, b.IP, bar(float64(b.Packets)/float64(top)), share(b.Packets, t.Packets), b.Packets, b.Bytes, b.Flows)
		}
	}
	if len(r.HotRows) > 0 {
		fmt.Fprintln(w, "\nhottest rows:")
		for _, h := range r.HotRows {
			fmt.Fprintf(w, "  %-12s row 0x%04x  primary %-15s %8d packets %10d bytes\n", h.Table, h.Row, h.Primary, h.Packets, h.Bytes)
		}
	}
	if a := r.Against; a != nil {
		fmt.Fprintf(w, "\nagainst %s: of %d steered flows\n", a.File, a.Flows)
		line := func(what string, f replay.FlowCount) {
			fmt.Fprintf(w, "  %-46s %8d flows %s %10d packets %12d bytes\n", what, f.Flows, share(f.Flows, a.Flows), f.Packets, f.Bytes)
		}
		line("unchanged", a.Unchanged)
		line("primary changes", a.PrimaryChanged)
		line("  survive (old primary is still a hop)", a.Survive)
		line("  break (old primary in no new hop)", a.Break)
		line("  no longer steered", a.NotSteered)
		fmt.Fprintf(w, "  newly steered: %d flows, %d packets, %d bytes\n", a.NewlySteered.Flows, a.NewlySteered.Packets, a.NewlySteered.Bytes)
	}
	if v := r.Verify; v != nil {
		fmt.Fprintf(w, "\nverify: %d packets compared with the model, %d differ\n", v.Compared, v.Mismatches)
		for _, m := range v.First {
			fmt.Fprintf(w, "  packet %d: %s\n    input  %s\n    kernel %s\n    model  %s\n", m.N, m.Description, m.Input, m.Kernel, m.Model)
		}
	}
}

func share(n, total uint64) string {
	if total == 0 {
		return "  0.0%"
	}
	return fmt.Sprintf("%5.1f%%", 100*float64(n)/float64(total))
}
