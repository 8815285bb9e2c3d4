package testrun

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/director/director/bpf"
	"github.com/director/director/loader/xdpbuild"
)

// Limits of the traffic generator (enum tg_limit in bpf/lab.c).
const (
	TrafficgenMaxFrame  = bpf.TgMaxFrame
	TrafficgenMaxFrames = bpf.TgMaxFrames
)

// Trafficgen sends frames out of an interface as fast as the kernel can,
// without a syscall per frame: BPF_PROG_RUN in live-frames mode runs a tiny
// program that writes the next prepared frame into a fresh packet and
// redirects it to the interface; the kernel flushes them in bulk.
type Trafficgen struct {
	objs bpf.LabObjects
	n    int
}

// NewTrafficgen loads the generator.
func NewTrafficgen() (*Trafficgen, error) {
	g := &Trafficgen{}
	if err := loadLab(&g.objs); err != nil {
		return nil, fmt.Errorf("loading the traffic generator: %w", err)
	}
	return g, nil
}

// loadLab loads the lab object's programs and maps into objs, for this
// kernel (xdpbuild.Lab).
func loadLab(objs any) error {
	spec, err := xdpbuild.Lab()
	if err != nil {
		return err
	}
	return spec.LoadAndAssign(objs, nil)
}

// Close unloads the generator.
func (g *Trafficgen) Close() error { return g.objs.Close() }

// Prepare loads the frames to send, in order, cycling (at most
// TrafficgenMaxFrames, each 14 to TrafficgenMaxFrame bytes).
func (g *Trafficgen) Prepare(frames [][]byte) error {
	if len(frames) == 0 || len(frames) > TrafficgenMaxFrames {
		return fmt.Errorf("%d frames: the generator takes 1 to %d", len(frames), TrafficgenMaxFrames)
	}
	for i, f := range frames {
		if len(f) < 14 || len(f) > TrafficgenMaxFrame {
			return fmt.Errorf("frame %d is %d bytes: the generator takes 14 to %d", i, len(f), TrafficgenMaxFrame)
		}
		v := bpf.TgFrame{Len: uint32(len(f))}
		copy(v.Data[:], f)
		if err := g.objs.TgFrames.Put(uint32(i), &v); err != nil {
			return err
		}
	}
	g.n = len(frames)
	return nil
}

// Run sends count frames out of ifindex, cycling through the prepared
// ones. ifindex must be a veth in the calling thread's network namespace:
// a generator must never aim at a real network.
func (g *Trafficgen) Run(ifindex int, count uint32) error {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("interface %d: %w", ifindex, err)
	}
	if l.Type() != "veth" {
		return fmt.Errorf("interface %d (%s) is a %s, not a veth: the traffic generator only sends into veth pairs", ifindex, l.Attrs().Name, l.Type())
	}
	if g.n == 0 {
		return fmt.Errorf("no frames prepared")
	}
	if err := g.objs.TgCfg.Put(uint32(0), &bpf.TgConfig{Ifindex: uint32(ifindex), Nframes: uint32(g.n)}); err != nil {
		return err
	}
	return RunLive(g.objs.XdpTrafficgen, make([]byte, TrafficgenMaxFrame), count, ifindex)
}
