package testrun

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

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
	counters *ebpf.Map   // the director's per-CPU global counters
	workers  []int       // CPUs, one worker pinned to each
	allowed  unix.CPUSet // the process's CPUs, given back to a worker's thread when it is done
	release  func()      // Hold's
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
	r := &Replayer{prog: prog, counters: counters, release: release, allowed: set}
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
	return r.RunWith(frames, out, nil)
}

// span is how many frames a worker takes at a time: small, so that a
// worker whose CPU is shared with other work (a replay's reader and
// aggregation) takes fewer spans instead of keeping the others waiting.
const span = 64

// RunWith is Run that calls each(worker, lo, hi), when each is not nil,
// for every span of frames before running the span in the kernel, on the
// goroutine that runs it. Work that goes with the frames (the model's view
// of them) then shares the CPUs as the kernel's does, with no wait between
// the two. Workers are numbered from 0 to Workers()-1.
func (r *Replayer) RunWith(frames [][]byte, out []Outcome, each func(worker, lo, hi int)) error {
	if len(frames) != len(out) {
		return fmt.Errorf("%d frames, %d outcomes", len(frames), len(out))
	}
	var (
		wg     sync.WaitGroup
		next   atomic.Int64
		failed atomic.Bool
	)
	errs := make([]error, len(r.workers))
	for w, cpu := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = r.worker(cpu, func() (lo, hi int, ok bool) {
				lo = int(next.Add(span)) - span
				if lo >= len(frames) || failed.Load() {
					return 0, 0, false
				}
				hi = min(lo+span, len(frames))
				if each != nil {
					each(w, lo, hi)
				}
				return lo, hi, true
			}, frames, out)
			if errs[w] != nil {
				failed.Store(true)
			}
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

// Workers is how many workers Run uses: one per CPU it may run on.
func (r *Replayer) Workers() int { return len(r.workers) }

func (r *Replayer) worker(cpu int, take func() (lo, hi int, ok bool), frames [][]byte, out []Outcome) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning a replay worker to CPU %d: %w", cpu, err)
	}
	// Unlocked, the thread runs other goroutines: pinned, it would keep
	// them off the other CPUs.
	defer unix.SchedSetaffinity(0, &r.allowed)
	var before []abi.Counters
	if err := r.counters.Lookup(uint32(0), &before); err != nil {
		return err
	}
	for {
		lo, hi, ok := take()
		if !ok {
			return nil
		}
		if err := r.runSpan(cpu, lo, frames[lo:hi], out[lo:hi], &before); err != nil {
			return err
		}
	}
}

// runSpan runs frames, the first of them frame base, into out on cpu;
// before is that CPU's counters as the last frame left them.
func (r *Replayer) runSpan(cpu, base int, frames [][]byte, out []Outcome, before *[]abi.Counters) error {
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
			return fmt.Errorf("frame %d: %w", base+i, err)
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
			if now[cpu].C[c] != (*before)[cpu].C[c] {
				out[i].Reason = c
				break
			}
		}
		*before = now
	}
	return nil
}
