package lab

import (
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/director/director/bpf"
)

// Run runs one frame through p with BPF_PROG_RUN and returns the verdict
// and the frame as the program left it.
func Run(p *ebpf.Program, frame []byte) (verdict uint32, out []byte, err error) {
	buf := make([]byte, len(frame)+256) // room for the encapsulation
	opts := &ebpf.RunOptions{Data: frame, DataOut: buf}
	v, err := p.Run(opts)
	if err != nil {
		return 0, nil, fmt.Errorf("BPF_PROG_RUN: %w", err)
	}
	return v, opts.DataOut, nil
}

// RunOn runs one frame through p as if it had arrived on ifindex (the
// backend program's routing depends on it).
func RunOn(p *ebpf.Program, frame []byte, ifindex int) (uint32, []byte, error) {
	buf := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: frame, DataOut: buf,
		Context: xdpMd{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex)}}
	v, err := p.Run(opts)
	if err != nil {
		return 0, nil, fmt.Errorf("BPF_PROG_RUN: %w", err)
	}
	return v, opts.DataOut, nil
}

// Baseline loads the empty XDP_TX program benchmarks compare against.
func Baseline() (*ebpf.Program, error) {
	return labProgram(func(o *bpf.LabPrograms) **ebpf.Program { return &o.XdpTxBaseline })
}

// PassAll loads a program that passes every packet, for the receiving end
// of a veth pair: a veth accepts XDP_TX'd frames only when its peer runs
// XDP (NAPI).
func PassAll() (*ebpf.Program, error) {
	return labProgram(func(o *bpf.LabPrograms) **ebpf.Program { return &o.XdpPassAll })
}

// AttachPassAll attaches PassAll to the interface named iface (in this
// thread's network namespace) through a link, in the mode flags give; the
// returned func detaches it and releases the program.
func AttachPassAll(iface string, flags link.XDPAttachFlags) (detach func(), err error) {
	nl, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	pass, err := PassAll()
	if err != nil {
		return nil, err
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: pass, Interface: nl.Index, Flags: flags})
	if err != nil {
		pass.Close()
		return nil, err
	}
	return func() {
		l.Close()
		pass.Close()
	}, nil
}

func labProgram(pick func(*bpf.LabPrograms) **ebpf.Program) (*ebpf.Program, error) {
	var progs bpf.LabPrograms
	if err := bpf.LoadLabObjects(&progs, nil); err != nil {
		return nil, fmt.Errorf("loading the lab programs: %w", err)
	}
	keep := pick(&progs)
	p := *keep
	*keep = nil
	progs.Close()
	return p, nil
}
