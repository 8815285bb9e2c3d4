package testrun

import (
	"fmt"
	"net"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/director/director/bpf"
)

// Run runs one frame through p with BPF_PROG_RUN and returns the verdict
// and the frame as the program left it.
func Run(p *ebpf.Program, frame []byte) (verdict uint32, out []byte, err error) {
	return runInto(p, frame, make([]byte, len(frame)+encapRoom))
}

// encapRoom is what the output buffer has beyond the frame: room for the
// encapsulation.
const encapRoom = 256

// runInto is Run with the output in buf (len(frame)+encapRoom bytes).
//
// It makes the BPF_PROG_TEST_RUN system call itself: cilium/ebpf's
// Program.Run also blocks and unblocks SIGPROF around it (so that a
// profiler cannot keep a run of many repeats from finishing), two more
// system calls, which made a one-frame run 1.38 µs against 0.89 here. A
// run of one repeat cannot be cut short that way: the kernel looks for
// signals only after a run, and older kernels that reported a signal
// found then as EINTR had run the frame all the same.
func runInto(p *ebpf.Program, frame, buf []byte) (verdict uint32, out []byte, err error) {
	if len(frame) == 0 || len(buf) == 0 {
		return 0, nil, fmt.Errorf("BPF_PROG_RUN: empty frame or buffer")
	}
	// The test member of union bpf_attr (include/uapi/linux/bpf.h), up to
	// batch_size.
	attr := struct {
		progFd, retval, dataSizeIn, dataSizeOut uint32
		dataIn, dataOut                         uint64
		repeat, duration, ctxSizeIn, ctxSizeOut uint32
		ctxIn, ctxOut                           uint64
		flags, cpu, batchSize, _                uint32
	}{
		progFd: uint32(p.FD()), dataSizeIn: uint32(len(frame)), dataSizeOut: uint32(len(buf)),
		dataIn: uint64(uintptr(unsafe.Pointer(&frame[0]))), dataOut: uint64(uintptr(unsafe.Pointer(&buf[0]))), repeat: 1,
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(frame)
	runtime.KeepAlive(buf)
	if errno != 0 && errno != unix.EINTR {
		return 0, nil, fmt.Errorf("BPF_PROG_RUN: %w", errno)
	}
	if int(attr.dataSizeOut) > len(buf) {
		return 0, nil, fmt.Errorf("BPF_PROG_RUN: %d bytes out, room for %d", attr.dataSizeOut, len(buf))
	}
	return attr.retval, buf[:attr.dataSizeOut], nil
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
	if err := loadLab(&progs); err != nil {
		return nil, fmt.Errorf("loading the lab programs: %w", err)
	}
	keep := pick(&progs)
	p := *keep
	*keep = nil
	progs.Close()
	return p, nil
}

// Hold keeps p in the kernel's XDP dispatcher until release, for runs of
// many frames: it attaches p, in generic mode, to the loopback device of a
// network namespace of its own. That device is down and nothing is sent
// there, so no packet reaches p by it and its counters move only for the
// frames run.
//
// BPF_PROG_RUN of an XDP program that is attached nowhere adds it to the
// dispatcher and takes it out again, and the kernel rewrites the
// dispatcher's code both times. Measured in the emulated guests, one run
// of a two-instruction program: Linux 5.10, 6.2 ms not held and 47 µs
// held; 6.1, 65 and 50 µs (this host, natively: 3.3 and 2.4 µs). The
// namespace goes with release, or with the process.
func Hold(p *ebpf.Program) (release func(), err error) {
	var ns netns.NsHandle
	var l link.Link
	err = onThread(func() error {
		if ns, err = netns.New(); err != nil {
			return fmt.Errorf("holding the program: a network namespace: %w", err)
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			l, err = link.AttachXDP(link.XDPOptions{Program: p, Interface: lo.Attrs().Index, Flags: link.XDPGenericMode})
		}
		if err != nil {
			ns.Close()
			return fmt.Errorf("holding the program: attaching it to a private loopback: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return func() { l.Close(); ns.Close() }, nil
}
