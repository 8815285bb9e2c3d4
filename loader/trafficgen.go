package loader

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/director/director/bpf"
)

// Trafficgen sends frames out of an interface as fast as the kernel can,
// without a syscall per frame: BPF_PROG_RUN in live-frames mode runs a tiny
// program on a fresh copy of the frame, which redirects it to the
// interface; the kernel flushes them in bulk.
type Trafficgen struct {
	objs bpf.TrafficgenObjects
}

// NewTrafficgen loads the generator.
func NewTrafficgen() (*Trafficgen, error) {
	g := &Trafficgen{}
	if err := bpf.LoadTrafficgenObjects(&g.objs, nil); err != nil {
		return nil, fmt.Errorf("loading the traffic generator: %w", err)
	}
	return g, nil
}

// Close unloads the generator.
func (g *Trafficgen) Close() error { return g.objs.Close() }

// Send transmits frame count times out of ifindex, which must be a veth in
// the calling thread's network namespace: a generator must never aim at a
// real network.
func (g *Trafficgen) Send(frame []byte, ifindex int, count uint32) error {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("interface %d: %w", ifindex, err)
	}
	if l.Type() != "veth" {
		return fmt.Errorf("interface %d (%s) is a %s, not a veth: the traffic generator only sends into veth pairs", ifindex, l.Attrs().Name, l.Type())
	}
	if len(frame) < 18 {
		return fmt.Errorf("frame of %d bytes is too short to generate", len(frame))
	}
	c := bpf.TrafficgenTgConfig{Ifindex: uint32(ifindex), L2len: 14}
	if frame[12] == 0x81 && frame[13] == 0x00 {
		c.L2len = 18
	}
	copy(c.L2[:], frame[:c.L2len])
	if err := g.objs.TgCfg.Put(uint32(0), &c); err != nil {
		return err
	}
	return RunLive(g.objs.XdpTrafficgen, frame, count, ifindex)
}
