package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/internal/picture"
	"github.com/director/director/internal/replay"
	"github.com/director/director/internal/replay/inkernel"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// replayGateway is the gateway MAC replays use when no director config
// gives one: the frames never leave the process.
var replayGateway = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}

var replayCmd = &command{
	uses: usesDirectorConfig,
	name: "replay", args: "CAPTURE --config CONFIG [--director-config FILE] [--against NEW] [--json] [--verify] [--model] [--hot N] [--picture F.png|F.svg [--table NAME]]",
	summary: "Run a capture through the real program, or the model, and report where it goes.",
	help: "Run every packet of a capture (pcap or pcapng) through the real XDP program with BPF_PROG_RUN, in a\n" +
		"private instance that never touches the live director, and report where the traffic goes: verdicts,\n" +
		"pass reasons, packets, bytes and flows per table and backend, the hottest rows. --against NEW shows\n" +
		"what NEW would do to those flows. --verify checks every packet against the Go model; --model runs the\n" +
		"model alone (no kernel needed). --picture draws packets per row, each table a heat map, the busiest\n" +
		"rows circled.",
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
	pic := pictureFlags(fs, "draw packets per row, each table a heat map, into `FILE` (.png or .svg)")
	pos, err := e.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if err := pic.check(); err != nil {
		return fmt.Errorf("replay: %w", err)
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
	rep, rows, runErr := rp.run(e, pos[0], *verify, *hot)
	if rep != nil && *pic.path != "" {
		tabs := rp.cur.Tables[:min(len(rp.cur.Tables), len(rows))]
		names := make([]string, len(tabs))
		for i, t := range tabs {
			names[i] = table.DisplayName(t.Name, i)
		}
		idx, err := pic.pick(names, nil)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		panels := picture.Panels(len(idx), func(j int) picture.Panel {
			i := idx[j]
			return picture.HeatPanel(names[i], tabs[i], rows[i])
		})
		if err := writePicture(e, *pic.path, panels); err != nil {
			return err
		}
	}
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

type replayer struct {
	cur, new  *inkernel.Side
	modelOnly bool
}

func (e *env) replayDirectorConfig() (*table.DirectorConfig, net.HardwareAddr, error) {
	if e.dirConfig == "" {
		// Documentation addresses, one of each family, so that a config
		// of either family's backends replays as it is.
		dc := table.DefaultDirectorConfig()
		dc.SrcIP = netip.MustParseAddr("192.0.2.1")
		dc.SrcIP6 = netip.MustParseAddr("2001:db8::1")
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

// newReplay reads the config (and the one to replay against) and, unless
// the replay is the model's alone, loads a private director for each. The
// programs are verified while the tables are built (inkernel.StartPrivate).
func newReplay(e *env, cfgPath, againstPath string, modelOnly bool) (*replayer, error) {
	dc, gw, err := e.replayDirectorConfig()
	if err != nil {
		return nil, err
	}
	var hw [6]byte
	copy(hw[:], gw)
	c := *dc
	c.GatewayMAC = gw
	paths := []string{cfgPath}
	if againstPath != "" {
		paths = append(paths, againstPath)
	}
	var pending []*inkernel.Private
	if !modelOnly {
		for range paths {
			pending = append(pending, inkernel.StartPrivate(c))
		}
	}
	rp := &replayer{modelOnly: modelOnly}
	fail := func(from int, err error) (*replayer, error) {
		for _, p := range pending[min(from, len(pending)):] {
			p.Cancel()
		}
		rp.close()
		return nil, err
	}
	sides := []**inkernel.Side{&rp.cur, &rp.new}
	for i, path := range paths {
		src, err := loadForApply(e, path, nil)
		if err != nil {
			return fail(i, err)
		}
		s := &inkernel.Side{Path: path, Tables: src.Tables, Model: model.New(*dc, hw, src.Tables)}
		*sides[i] = s
		if !modelOnly {
			if err := pending[i].Serve(s); err != nil {
				return fail(i+1, fmt.Errorf("replay: %w", err))
			}
		}
	}
	return rp, nil
}

func (rp *replayer) close() {
	rp.cur.Close()
	rp.new.Close()
}

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
func (rp *replayer) run(e *env, path string, verify bool, hot int) (*replay.Report, [][]uint64, error) {
	r, err := pcapfile.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	defer r.Close()
	names := make([]string, len(rp.cur.Tables))
	for i, t := range rp.cur.Tables {
		names[i] = t.Name
	}
	agg := replay.NewAggregator(path, r.FileFormat, names, loader.CounterNames())
	var vr *replay.VerifyReport
	if verify {
		vr = &replay.VerifyReport{First: []replay.Mismatch{}}
	}
	start := time.Now()
	var read atomic.Uint64
	stop := make(chan struct{})
	progress := isTerminal(e.stderr)
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
	if rp.modelOnly {
		var against *model.Datapath
		if rp.new != nil {
			against = rp.new.Model
		}
		err = replay.RunModel(r, path, rp.cur.Model, against, agg, &read)
	} else {
		err = inkernel.Run(r, path, rp.cur, rp.new, agg, vr, &read)
		var re *inkernel.RunError
		if errors.As(err, &re) {
			close(stop)
			return nil, nil, fmt.Errorf("replay: %w", err)
		}
	}
	close(stop)
	if err != nil {
		err = fmt.Errorf("replay: %w", err)
	}
	rep := rp.finish(e, agg, vr, start, progress, hot)
	return rep, agg.RowPackets(), err
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
		againstPath = rp.new.Path
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

func printReplay(w io.Writer, r *replay.Report) {
	c := r.Capture
	fmt.Fprintf(w, "capture %s (%s): %d packets, %d bytes", c.File, c.Format, c.Packets, c.Bytes)
	if c.Truncated > 0 {
		fmt.Fprintf(w, ", %d cut short by the snap length", c.Truncated)
	}
	if c.MultiBuffer > 0 {
		fmt.Fprintf(w, ", %d multi-buffer (over %d bytes)", c.MultiBuffer, model.FirstBuffer)
	}
	if c.NotRun > 0 {
		fmt.Fprintf(w, ", %d of them not run by this kernel (no multi-buffer XDP): the model's fate", c.NotRun)
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
	if len(r.QUIC) > 0 {
		fmt.Fprintln(w, "  QUIC-LB (UDP to tables with a quic block):")
		for _, name := range loader.CounterNames() {
			if qc, ok := r.QUIC[name]; ok {
				fmt.Fprintf(w, "    %-26s %10d packets %12d bytes\n", name, qc.Packets, qc.Bytes)
			}
		}
	}
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
			if len(h.SentTo) > 1 {
				var to []string
				for _, b := range h.SentTo {
					to = append(to, fmt.Sprintf("%s %d", b.IP, b.Packets))
				}
				fmt.Fprintf(w, "    sent to %d backends by connection ID: %s packets\n", len(h.SentTo), strings.Join(to, ", "))
			}
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
