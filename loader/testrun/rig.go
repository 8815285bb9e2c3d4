package testrun

import (
	"errors"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/director/director/loader/xdpmode"
)

// Rig measures a program on traffic. It is a veth pair in the calling
// thread's network namespace: the program under test on one end, a
// pass-everything program on the other (its NAPI takes back what the
// program transmits), and frames injected into that other end. In native
// mode the traffic generator injects them (BPF_PROG_RUN in live-frames
// mode redirecting into the veth, so they arrive in NAPI batches as from a
// NIC); in generic mode a packet socket does (redirected frames reach only
// a veth running native XDP), and so it does in native mode on a kernel
// without live-frames mode (before 5.18), slower: a syscall per batch.
// bench and the datapath's benchmarks both measure with it.
type Rig struct {
	prog      *ebpf.Program
	mode      string
	name      string // of the program's end; the other is name+"-g"
	peer      int    // the injecting end's index
	closers   []func() error
	tg        *Trafficgen
	sock      *Socket
	prepared  [][]byte // what tg holds
	stopStats func()
}

// NewRig makes the veth pair name/name+"-g", attaches prog to name in mode
// (native or generic), and turns on the kernel's run-time statistics.
func NewRig(name string, prog *ebpf.Program, mode string) (r *Rig, err error) {
	flags, err := xdpmode.Flags(mode)
	if err != nil {
		return nil, err
	}
	gen := name + "-g"
	if err := Veth(name, gen); err != nil {
		return nil, err
	}
	r = &Rig{prog: prog, mode: mode, name: name}
	r.closers = append(r.closers, func() error { return DeleteLink(name) })
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	dir, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	peer, err := net.InterfaceByName(gen)
	if err != nil {
		return nil, err
	}
	r.peer = peer.Index
	detach, err := AttachPassAll(gen, link.XDPDriverMode)
	if err != nil {
		return nil, err
	}
	r.closers = append(r.closers, func() error { detach(); return nil })
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: dir.Index, Flags: flags})
	if err != nil {
		return nil, err
	}
	r.closers = append(r.closers, l.Close)
	if mode == xdpmode.Native && HaveLiveFrames() {
		if r.tg, err = NewTrafficgen(); err != nil {
			return nil, err
		}
		r.closers = append(r.closers, r.tg.Close)
	} else {
		if r.sock, err = Listen(gen); err != nil {
			return nil, err
		}
		r.closers = append(r.closers, r.sock.Close)
	}
	if r.stopStats, err = EnableRunStats(); err != nil {
		return nil, err
	}
	r.closers = append(r.closers, func() error { r.stopStats(); return nil })
	return r, nil
}

// Live reports whether the traffic generator injects the frames (else a
// packet socket does).
func (r *Rig) Live() bool { return r.tg != nil }

// Injector says how the rig injects frames, for reports.
func (r *Rig) Injector() string {
	if r.tg != nil {
		return "traffic generator (BPF_PROG_RUN in live-frames mode)"
	}
	return "packet socket (sendmmsg)"
}

// Close detaches everything and deletes the veth pair.
func (r *Rig) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i]())
	}
	return errors.Join(errs...)
}

// Send injects count frames, cycling through frames (native mode: at most
// TrafficgenMaxFrames of them), and returns what the program cost over it.
func (r *Rig) Send(frames [][]byte, count uint32) (Cost, error) {
	if r.tg != nil && !same(frames, r.prepared) {
		if err := r.tg.Prepare(frames); err != nil {
			return Cost{}, err
		}
		r.prepared = frames
	}
	return MeasureCost(r.prog, func() error {
		if r.tg != nil {
			return r.tg.Run(r.peer, count)
		}
		for sent := uint32(0); sent < count; {
			batch := frames[:min(len(frames), int(count-sent))]
			if err := r.sock.SendBatch(batch); err != nil {
				return err
			}
			sent += uint32(len(batch))
		}
		return nil
	})
}

// same reports whether a and b are the same frames (the same slice).
func same(a, b [][]byte) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}
