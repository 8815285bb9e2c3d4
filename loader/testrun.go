package loader

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf"
)

// Run runs one frame through the program with BPF_PROG_RUN and returns the
// verdict and the frame as the program left it.
func (d *Director) Run(frame []byte) (verdict uint32, out []byte, err error) {
	return run(d.Prog, frame, 1)
}

func run(p *ebpf.Program, frame []byte, repeat uint32) (uint32, []byte, error) {
	buf := make([]byte, len(frame)+256) // room for the encapsulation
	opts := &ebpf.RunOptions{Data: frame, DataOut: buf, Repeat: repeat}
	v, err := p.Run(opts)
	if err != nil {
		return 0, nil, fmt.Errorf("BPF_PROG_RUN: %w", err)
	}
	return v, opts.DataOut, nil
}

// Baseline loads the empty XDP_TX program benchmarks compare against.
func Baseline() (*ebpf.Program, error) { return helperProgram("xdp_tx_baseline") }

// PassAll loads a program that passes every packet, for the receiving end
// of a veth pair.
func PassAll() (*ebpf.Program, error) { return helperProgram("xdp_pass_all") }

func helperProgram(name string) (*ebpf.Program, error) {
	spec, err := bpf.LoadDirector()
	if err != nil {
		return nil, err
	}
	ps, ok := spec.Programs[name]
	if !ok {
		return nil, fmt.Errorf("no program %s", name)
	}
	return ebpf.NewProgram(ps)
}
