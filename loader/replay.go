package loader

import (
	"fmt"
	"net"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/director/director/bpf"
	"github.com/director/director/table"
	"github.com/director/director/table/model"
)

// Outcome is what the program did with one frame.
type Outcome struct {
	Verdict uint32
	Out     []byte // the frame as the program left it
	Reason  int    // for XDP_PASS: the counter it incremented (index in CounterNames); -1 otherwise
}

// Replayer runs frames through a private, unpinned director that serves
// the given tables: it never touches a live director and needs no
// interface.
type Replayer struct {
	D       *Director
	workers []int // CPUs, one worker pinned to each
}

// NewReplayer loads a private director with the config and tables.
func NewReplayer(dc *table.DirectorConfig, gateway net.HardwareAddr, tables []*table.Table) (*Replayer, error) {
	d, err := Load("")
	if err != nil {
		return nil, err
	}
	if err := d.SetConfig(dc, gateway); err != nil {
		d.Close()
		return nil, err
	}
	if _, err := d.Apply(tables, nil); err != nil {
		d.Close()
		return nil, err
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		d.Close()
		return nil, err
	}
	r := &Replayer{D: d}
	for cpu := 0; cpu < 1024 && len(r.workers) < runtime.GOMAXPROCS(0); cpu++ {
		if set.IsSet(cpu) {
			r.workers = append(r.workers, cpu)
		}
	}
	return r, nil
}

// Close unloads the private director.
func (r *Replayer) Close() error { return r.D.Close() }

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
	var before []bpf.DirectorDirCounters
	if err := r.D.Maps.Counters.Lookup(uint32(0), &before); err != nil {
		return err
	}
	for i, f := range frames {
		// BPF_PROG_RUN refuses frames no interface delivers: shorter than
		// an Ethernet header, or longer than a first buffer and every
		// fragment. The model gives them the same fate.
		if len(f) < 14 {
			out[i] = Outcome{Verdict: 2, Out: f, Reason: int(bpf.DirectorDirCounterDIR_C_PASS_MALFORMED)}
			continue
		}
		if len(f) > model.MaxFrame {
			out[i] = Outcome{Verdict: 2, Out: f, Reason: int(bpf.DirectorDirCounterDIR_C_PASS_TOO_BIG)}
			continue
		}
		v, o, err := r.D.Run(f)
		if err != nil {
			return fmt.Errorf("frame %d: %w", i, err)
		}
		out[i] = Outcome{Verdict: v, Out: o, Reason: -1}
		if v == 3 { // XDP_TX: the counters it moved are known
			continue
		}
		var now []bpf.DirectorDirCounters
		if err := r.D.Maps.Counters.Lookup(uint32(0), &now); err != nil {
			return err
		}
		for c := int(bpf.DirectorDirCounterDIR_C_PASS_NOT_IP); c < int(bpf.DirectorDirCounterDIR_C_MAX); c++ {
			if now[cpu].C[c] != before[cpu].C[c] {
				out[i].Reason = c
				break
			}
		}
		before = now
	}
	return nil
}
