package testrun

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
)

// Outcome is what the program did with one frame.
type Outcome struct {
	Verdict uint32
	Out     []byte // the frame as the program left it
	Reason  int    // for XDP_PASS: the counter it incremented (index in the counter names); -1 otherwise
	// NotRun is a frame over one buffer that the kernel could not run:
	// BPF_PROG_RUN takes such frames only for a multi-buffer program (the
	// single-buffer build's kernels have none). Verdict, Out and Reason
	// are unset.
	NotRun bool
}

// Replayer runs frames through a private, unpinned director program (its
// caller loads and configures it), in parallel, one worker pinned to each
// CPU, reading each passed frame's reason from that CPU's counters.
type Replayer struct {
	prog     *ebpf.Program
	counters *ebpf.Map // the director's per-CPU global counters
	workers  []int     // CPUs, one worker pinned to each
	release  func()    // Hold's
}

// NewReplayer runs frames through prog, whose global counters are
// counters: a director no interface is attached to, so that the counters
// move only for the frames run here. It holds prog (Hold) until Close.
func NewReplayer(prog *ebpf.Program, counters *ebpf.Map) (*Replayer, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	release, err := Hold(prog)
	if err != nil {
		return nil, err
	}
	r := &Replayer{prog: prog, counters: counters, release: release}
	for cpu := 0; cpu < 1024 && len(r.workers) < runtime.GOMAXPROCS(0); cpu++ {
		if set.IsSet(cpu) {
			r.workers = append(r.workers, cpu)
		}
	}
	return r, nil
}

// Close lets the program go from the dispatcher; the program itself is
// its loader's to close.
func (r *Replayer) Close() {
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

// Run processes frames in parallel, one worker per CPU, and fills out
// (len(out) == len(frames)). Each worker is pinned to its CPU so that, for
// a passed frame, the reason can be read from that CPU's counters: the one
// that moved is the one the program incremented.
func (r *Replayer) Run(frames [][]byte, out []Outcome) error {
	if len(frames) != len(out) {
		return fmt.Errorf("%d frames, %d outcomes", len(frames), len(out))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(r.workers))
	chunk := (len(frames) + len(r.workers) - 1) / len(r.workers)
	for w, cpu := range r.workers {
		lo := w * chunk
		hi := min(lo+chunk, len(frames))
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = r.worker(cpu, frames[lo:hi], out[lo:hi])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *Replayer) worker(cpu int, frames [][]byte, out []Outcome) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning a replay worker to CPU %d: %w", cpu, err)
	}
	var before []abi.Counters
	if err := r.counters.Lookup(uint32(0), &before); err != nil {
		return err
	}
	// The outputs share one allocation: a replay makes one per frame.
	room := 0
	for _, f := range frames {
		room += len(f) + encapRoom
	}
	arena := make([]byte, room)
	for i, f := range frames {
		buf := arena[: len(f)+encapRoom : len(f)+encapRoom]
		arena = arena[len(buf):]
		// BPF_PROG_RUN refuses frames no interface delivers: shorter than
		// an Ethernet header, or longer than a first buffer and every
		// fragment. The model gives them the same fate.
		if len(f) < 14 {
			out[i] = Outcome{Verdict: uint32(model.XDPPass), Out: f, Reason: abi.CPassMalformed}
			continue
		}
		if len(f) > model.MaxFrame {
			out[i] = Outcome{Verdict: uint32(model.XDPPass), Out: f, Reason: abi.CPassTooBig}
			continue
		}
		v, o, err := runInto(r.prog, f, buf)
		if err != nil && len(f) > model.FirstBuffer && (errors.Is(err, unix.EMSGSIZE) || errors.Is(err, unix.EINVAL)) {
			out[i] = Outcome{NotRun: true}
			continue
		}
		if err != nil {
			return fmt.Errorf("frame %d: %w", i, err)
		}
		out[i] = Outcome{Verdict: v, Out: o, Reason: -1}
		if int(v) == model.XDPTX { // the counters it moved are known
			continue
		}
		var now []abi.Counters
		if err := r.counters.Lookup(uint32(0), &now); err != nil {
			return err
		}
		for c := abi.CPassNotIP; c < abi.NumCounters; c++ {
			if now[cpu].C[c] != before[cpu].C[c] {
				out[i].Reason = c
				break
			}
		}
		before = now
	}
	return nil
}
