package testrun

import (
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// xdpMd is struct xdp_md, the context BPF_PROG_RUN takes for XDP.
type xdpMd struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// RunLive runs frame through p repeat times back to back in live-frames
// mode (BPF_F_TEST_XDP_LIVE_FRAMES): every run gets a fresh copy of the
// frame, as if it had just arrived on ifindex, and XDP_TX'd frames really
// leave through ifindex. This is how the program is timed doing its real
// work, with warm caches, without a NIC.
func RunLive(p *ebpf.Program, frame []byte, repeat uint32, ifindex int) error {
	_, err := p.Run(&ebpf.RunOptions{
		Data:    frame,
		Repeat:  repeat,
		Flags:   unix.BPF_F_TEST_XDP_LIVE_FRAMES,
		Context: xdpMd{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex)},
	})
	if err != nil {
		return fmt.Errorf("BPF_PROG_RUN in live-frames mode: %w", err)
	}
	return nil
}

// HaveLiveFrames says whether the kernel runs XDP programs in live-frames
// mode (Linux 5.18): where it does not, the rig injects frames with a
// packet socket instead, and the traffic generator cannot run.
var HaveLiveFrames = sync.OnceValue(func() bool {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1 /* XDP_DROP */), asm.Return()},
	})
	if err != nil {
		return false
	}
	defer p.Close()
	return RunLive(p, make([]byte, 64), 1, 1) == nil
})

// HaveRunContext says whether the kernel's BPF_PROG_RUN takes an XDP
// context (struct xdp_md: the ingress interface, Linux 5.13). Without it
// a frame is run as if it came in on the namespace's loopback.
var HaveRunContext = sync.OnceValue(func() bool {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
	})
	if err != nil {
		return false
	}
	defer p.Close()
	_, _, err = RunOn(p, make([]byte, 64), 1)
	return err == nil
})

// EnableRunStats turns on the kernel's BPF run-time statistics until the
// returned function is called.
func EnableRunStats() (stop func(), err error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enabling BPF run-time statistics: %w", err)
	}
	return func() { c.Close() }, nil
}

// Cost is a program's run-time statistics over an interval.
type Cost struct {
	Runs    uint64
	Runtime time.Duration // the program's own time
	Wall    time.Duration // f's, the generator's and the rest of the path's included
}

// MeasureCost runs f and returns how many times p ran during it and for how
// long in all, from the kernel's statistics (see EnableRunStats).
func MeasureCost(p *ebpf.Program, f func() error) (Cost, error) {
	before, err := p.Stats()
	if err != nil {
		return Cost{}, err
	}
	start := time.Now()
	if err := f(); err != nil {
		return Cost{}, err
	}
	wall := time.Since(start)
	after, err := p.Stats()
	if err != nil {
		return Cost{}, err
	}
	return Cost{Runs: after.RunCount - before.RunCount, Runtime: after.Runtime - before.Runtime, Wall: wall}, nil
}
