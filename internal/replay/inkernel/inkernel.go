//go:build linux

// Package inkernel is `director replay`'s kernel pipeline: each packet of
// a capture through a private director's program (BPF_PROG_RUN, batches
// in parallel on every CPU), each side of a change on an instance of its
// own, and with --verify through the model too, into package replay's
// report. Package replay itself is pure (the model's pipeline, the
// aggregation and the report); this is the part that needs the kernel.
package inkernel

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/classify"
	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/internal/replay"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/table"
)

// Side is one config's tables as a kernel replay runs them: through a
// private director's program (BPF_PROG_RUN) and, for each packet's flow,
// table and row, through the model.
type Side struct {
	Path    string
	Tables  []*table.Table
	Model   *model.Datapath
	private *loader.Director
	kernel  *testrun.Replayer
	cls     []*classify.Classifier // the model's, one per worker
}

// Close releases the side's private director.
func (s *Side) Close() {
	if s != nil && s.kernel != nil {
		s.kernel.Close()
		s.kernel = nil
	}
	if s != nil && s.private != nil {
		s.private.Close()
		s.private = nil
	}
}

// Private is a private director being loaded for a side whose tables are
// still being built: the verifier works meanwhile, so that a replay's
// start-up is the longer of the two, not their sum. Serve or Cancel it.
type Private struct {
	tables chan []*table.Table
	done   chan privateLoad
}

type privateLoad struct {
	d   *loader.Director
	err error
}

// errNoTables ends a load whose tables never came (Cancel).
var errNoTables = errors.New("no tables")

// StartPrivate starts loading a private director with dc's settings.
func StartPrivate(dc table.DirectorConfig) *Private {
	p := &Private{tables: make(chan []*table.Table, 1), done: make(chan privateLoad, 1)}
	go func() {
		d, err := loader.LoadServing(func(d *loader.Director) error {
			t, ok := <-p.tables
			if !ok {
				return errNoTables
			}
			return d.Serve(&dc, t)
		})
		p.done <- privateLoad{d, err}
	}()
	return p
}

// Serve gives the director s's tables and, once it runs them, makes it s's
// kernel.
func (p *Private) Serve(s *Side) error {
	p.tables <- s.Tables
	l := <-p.done
	if errors.Is(l.err, unix.EPERM) {
		// Not cilium/ebpf's hint about MEMLOCK: privileges are missing.
		return errors.New("running the XDP program in the kernel (BPF_PROG_RUN) needs root, or CAP_BPF " +
			"and CAP_NET_ADMIN; --model replays through the Go model and needs neither")
	}
	if l.err != nil {
		return l.err
	}
	r, err := testrun.NewReplayer(l.d.Prog, l.d.Maps.Counters)
	if err != nil {
		l.d.Close()
		return err
	}
	s.private, s.kernel = l.d, r
	return nil
}

// Cancel abandons the load.
func (p *Private) Cancel() {
	close(p.tables)
	if l := <-p.done; l.d != nil {
		l.d.Close()
	}
}

// kernelBatch is how many packets go through the stages (read, run,
// aggregate) at a time. Small enough that the first batch's read and the
// last one's aggregation, which nothing overlaps, are short; 2,048 was
// fastest of 1,024 to 16,384 on a 100,000-packet capture.
const kernelBatch = 1 << 11

// Run replays the capture r reads (from path) through cur's program
// in the kernel and, when against is not nil, through against's, into agg.
// With vr, every packet is also run through the reference model, which
// must agree on the verdict and every byte; without, the model (its fast
// form) only names each packet's flow, table and row. read follows how many
// packets have been counted. On a capture error it still leaves the report
// of what was processed in agg, and returns the error; if the program
// cannot be run, the error is a *RunError and agg holds no report.
//
// Three stages overlap: reading the capture, running batches through the
// program and the model on every CPU, and aggregating.
func Run(r *pcapfile.Reader, path string, cur, against *Side, agg *replay.Aggregator, vr *replay.VerifyReport, read *atomic.Uint64) error {
	k := &kernelRun{r: r, path: path, cur: cur, against: against, verify: vr != nil}
	batches := make(chan batch[pcapfile.Packet], 2)
	go k.readAll(batches)
	results := make(chan kernelJob, 2)
	go k.runAll(batches, results)
	var runErr error
	for j := range results {
		if j.err != nil {
			runErr = j.err
			continue
		}
		aggregate(j.batch.items, j.cur, j.new, agg, vr)
		if read != nil {
			read.Store(agg.Packets())
		}
	}
	if runErr != nil {
		return &RunError{runErr}
	}
	return k.readErr
}

// RunError is a failure to run the program through BPF_PROG_RUN, as
// opposed to one reading the capture.
type RunError struct{ Err error }

func (e *RunError) Error() string { return e.Err.Error() }
func (e *RunError) Unwrap() error { return e.Err }

type kernelRun struct {
	r            *pcapfile.Reader
	path         string
	cur, against *Side
	verify       bool
	readErr      error // the reader's; read once results is closed
}

// kernelJob is a batch and what each side did with it.
type kernelJob struct {
	batch    batch[pcapfile.Packet]
	cur, new []outcome
	err      error
}

// readAll reads the capture in batches into batches, and closes it.
func (k *kernelRun) readAll(batches chan<- batch[pcapfile.Packet]) {
	defer close(batches)
	fail := func(err error) {
		k.readErr = fmt.Errorf("%s: %w; %d packets were processed", k.path, err, k.r.Count())
	}
	// A mapped capture that shrinks faults: an error, not a crash.
	err := k.r.Guard(func() {
		for {
			b := batch[pcapfile.Packet]{items: make([]pcapfile.Packet, 0, kernelBatch)}
			for len(b.items) < kernelBatch {
				p, err := k.r.Read()
				if err == io.EOF {
					break
				}
				if err != nil {
					fail(err)
					break
				}
				if len(b.items) == 0 {
					b.base = p.N
				}
				b.items = append(b.items, p)
			}
			if len(b.items) > 0 {
				batches <- b
			}
			if k.readErr != nil || len(b.items) < kernelBatch {
				return
			}
		}
	})
	if err != nil {
		fail(err)
	}
}

// runAll runs each batch through both sides into results, and closes it.
// After an error it drains batches, so that the reader finishes.
func (k *kernelRun) runAll(batches <-chan batch[pcapfile.Packet], results chan<- kernelJob) {
	defer close(results)
	for b := range batches {
		j := kernelJob{batch: b}
		j.cur, j.err = k.runSide(k.cur, b.items)
		if j.err == nil && k.against != nil {
			j.new, j.err = k.runSide(k.against, b.items)
		}
		results <- j
		if j.err != nil {
			for range batches {
			}
			return
		}
	}
}

// outcome is one packet's result on one side.
type outcome struct {
	verdict int          // the XDP action
	out     []byte       // the frame as the program left it
	reason  int          // for XDP_PASS: the pass counter, an index in loader.CounterNames(); -1 if none moved
	res     model.Result // the model's view (flow, table, row)
	notRun  bool         // the kernel could not run it (testrun.Outcome.NotRun): the rest is the model's
}

func (o *outcome) tx() bool { return o.verdict == model.XDPTX }

func (k *kernelRun) runSide(s *Side, packets []pcapfile.Packet) ([]outcome, error) {
	out := make([]outcome, len(packets))
	frames := make([][]byte, len(packets))
	for i := range packets {
		frames[i] = packets[i].Frame
	}
	// The model on the kernel's workers, a span at a time: the reference
	// when its bytes are compared, otherwise the fast classifier, one per
	// worker, kept across batches.
	for len(s.cls) < s.kernel.Workers() {
		s.cls = append(s.cls, classify.New(s.Model))
	}
	view := func(w, lo, hi int) {
		for i := lo; i < hi; i++ {
			if k.verify {
				out[i].res = s.Model.Process(frames[i])
			} else {
				out[i].res, _ = s.cls[w].Classify(frames[i])
			}
		}
	}
	ko := make([]testrun.Outcome, len(packets))
	if err := s.kernel.RunWith(frames, ko, view); err != nil {
		return nil, err
	}
	for i := range ko {
		if ko[i].NotRun {
			// The model's fate for it, as the kernel's would be with a
			// multi-buffer program, not verified.
			m := s.Model.Process(frames[i])
			out[i] = outcome{verdict: m.Verdict, out: m.Out, reason: m.Reason, res: m, notRun: true}
			if m.Verdict != model.XDPPass {
				out[i].reason = -1
			}
			continue
		}
		out[i].verdict = int(ko[i].Verdict)
		out[i].out = ko[i].Out
		out[i].reason = ko[i].Reason
	}
	return out, nil
}

func sample(p pcapfile.Packet, o outcome) replay.Sample {
	s := replay.Sample{N: p.N, Bytes: len(p.Frame), Verdict: o.verdict, Reason: o.reason, Table: -1, QUIC: o.res.QUIC}
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
		// A too-big reply is sent back to the client: in no table's rows.
		if o.res.Verdict == model.XDPTX && o.res.TooBig != abi.CICMPTooBig {
			s.Table, s.Row = o.res.Table, o.res.Row
		}
	}
	return s
}

func aggregate(packets []pcapfile.Packet, cur, nw []outcome, agg *replay.Aggregator, vr *replay.VerifyReport) {
	for i, p := range packets {
		agg.Captured(len(p.Frame), p.Truncated)
		if cur[i].notRun {
			agg.NotRun()
		}
		s := sample(p, cur[i])
		agg.Add(&s)
		if nw != nil {
			s := sample(p, nw[i])
			agg.AddAgainst(&s)
		}
		if vr == nil || cur[i].notRun {
			continue
		}
		vr.Compared++
		k, m := &cur[i], &cur[i].res
		desc, same := compare(k, m)
		if same {
			continue
		}
		vr.Mismatches++
		if len(vr.First) < 5 {
			vr.First = append(vr.First, replay.Mismatch{N: p.N, Input: hex.EncodeToString(p.Frame),
				Kernel: hex.EncodeToString(k.out), Model: hex.EncodeToString(m.Out),
				KernelTX: k.tx(), ModelTX: m.Verdict == model.XDPTX,
				KernelVerdict: verdictName(k.verdict, k.reason), ModelVerdict: verdictName(m.Verdict, m.Reason),
				Description: desc})
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

// batch is what one stage of the pipeline hands the next: frames whose
// capture places count from base.
type batch[T any] struct {
	base  int
	items []T
}
