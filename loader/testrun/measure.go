package testrun

import (
	"errors"
	"os"
	"time"

	"github.com/cilium/ebpf"
)

// perCall is how many frames one BPF_PROG_RUN call sends at most; a
// capture larger than the generator holds is sent in windows, each cycled
// windowRepeats times. The first call sends at most firstCall.
const (
	perCall       = 1 << 20
	windowRepeats = 64
	firstCall     = 1 << 14
)

// callBudget is how many frames the next call may send, after one of n
// frames took took: as many as a quarter of d holds at that rate, at most
// perCall.
func callBudget(n uint32, took, d time.Duration) uint32 {
	if took <= 0 {
		return perCall
	}
	fit := float64(n) * float64(d/4) / float64(took)
	return uint32(max(1, min(fit, perCall)))
}

// window is where the w'th window of size frames starts in n frames: the
// windows go round the capture, the last one perhaps short.
func window(w, size, n int) int {
	windows := (n + size - 1) / size
	return (w % windows) * size
}

// Measurement is what Measure saw of a program.
type Measurement struct {
	Seconds        float64
	Runs           uint64  // times the program ran
	PacketsPerSec  float64 // runs per second: the generator's rate, not the program's capacity
	NsPerPacket    float64 // the program's own time, from BPF run-time statistics
	DistinctFrames int     // how many of the frames it was given were sent at least once
	Injector       string  // how frames were injected (Rig.Injector)
}

// Measure runs prog on frames for d (attached in mode, native or generic),
// on a Rig in the current (private) namespace, sending the capture window
// by window: the generator holds TrafficgenMaxFrames frames at a time. It
// runs on the namespace's thread; a value on stop ends it early, with an
// error. This is 'director bench'.
func Measure(prog *ebpf.Program, frames [][]byte, mode string, d time.Duration, stop <-chan os.Signal) (Measurement, error) {
	var r Measurement
	rig, err := NewRig("dir0", prog, mode)
	if err != nil {
		return r, err
	}
	defer rig.Close()
	r.Injector = rig.Injector()
	live := rig.Live()
	size := TrafficgenMaxFrames
	if !live {
		size = 4096 // a packet socket's batch
	}
	start := time.Now()
	// Windows sent, by their first frame: how much of the capture ran.
	sent := map[int]int{}
	var cost Cost
	// How many frames a call may send: a call cannot be stopped, so the
	// first is small and the rest are sized from the rate it showed, to
	// take at most a quarter of d each. On a slow machine (the emulated
	// guests of 'make test-kernels', 50,000 frames a second) a call of
	// perCall frames would take twenty seconds whatever d is.
	budget := uint32(firstCall)
	for w := 0; time.Since(start) < d; w++ {
		select {
		case <-stop:
			return r, errors.New("interrupted")
		default:
		}
		lo := window(w, size, len(frames))
		hi := min(lo+size, len(frames))
		sent[lo] = hi - lo
		// Each generator call costs milliseconds to set up, so it sends
		// many frames: a window is cycled through windowRepeats times,
		// and a capture that fits is sent perCall times over.
		n := uint32(hi-lo) * windowRepeats
		if !live {
			n = uint32(hi - lo)
		} else if len(frames) <= size {
			n = perCall
		}
		n = max(min(n, budget), uint32(hi-lo))
		began := time.Now()
		c, err := rig.Send(frames[lo:hi], n)
		if err != nil {
			return r, err
		}
		cost.Runs += c.Runs
		cost.Runtime += c.Runtime
		budget = callBudget(n, time.Since(began), d)
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
