// Package xdpbuild picks which of the two builds of the XDP programs
// (bpf/build.h) the running kernel loads, by probing it, for the loader and
// the lab alike.
package xdpbuild

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/director/director/bpf"
)

// Build is which build of the programs (bpf/build.h) this kernel runs.
type Build string

const (
	// MultiBuffer is the build for kernels with multi-buffer XDP (Linux
	// 5.18 and up): programs flagged xdp.frags, measuring frames with
	// bpf_xdp_get_buff_len and the link with bpf_check_mtu.
	MultiBuffer Build = "multi-buffer"
	// SingleBuffer is the build for kernels before that (5.10 to 5.17):
	// the frame is its one buffer, and the link's MTU is the one the
	// loader keeps in link_mtus.
	SingleBuffer Build = "single-buffer"
)

// Env, set to a Build, makes the loader use that build whatever the
// kernel has: tests run the single-buffer build on new kernels, to check
// that it sends what the multi-buffer build sends.
const Env = "DIRECTOR_BUILD"

// multiBufferNeeds is what the multi-buffer build uses that the
// single-buffer build does without, as the probes name it (lacks).
var multiBufferNeeds = []struct {
	name  string
	probe func() error
}{
	{"multi-buffer XDP (xdp.frags)", func() error { return HaveXDPFrags() }},
	{"helper bpf_xdp_get_buff_len", func() error { return features.HaveProgramHelper(ebpf.XDP, asm.FnXdpGetBuffLen) }},
	{"helper bpf_check_mtu", func() error { return features.HaveProgramHelper(ebpf.XDP, asm.FnCheckMtu) }},
}

// Lacking is what the kernel lacks of what the multi-buffer build uses, as
// the loader's probes name it; empty on a kernel that runs it.
func Lacking() []string { return chosenBuild().lacking }

// HaveXDPFrags says whether the kernel takes XDP programs flagged as
// handling multi-buffer frames (BPF_F_XDP_HAS_FRAGS, Linux 5.18).
var HaveXDPFrags = sync.OnceValue(func() error {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, Flags: unix.BPF_F_XDP_HAS_FRAGS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
	})
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("BPF_F_XDP_HAS_FRAGS refused: %w", ebpf.ErrNotSupported)
	}
	if err != nil {
		return err
	}
	return p.Close()
})

// buildChoice is the build this process uses, and what of the
// multi-buffer build's needs the kernel lacks (empty for MultiBuffer).
type buildChoice struct {
	build   Build
	lacking []string
	err     error
}

// chosenBuild probes the kernel once a process. A probe that fails for
// another reason than the kernel's lack (no privileges, say) leaves the
// multi-buffer build, whose load then says what is wrong.
var chosenBuild = sync.OnceValue(func() buildChoice {
	RaiseMemlock() // the probes make maps and programs
	var c buildChoice
	for _, n := range multiBufferNeeds {
		if err := n.probe(); errors.Is(err, ebpf.ErrNotSupported) {
			c.lacking = append(c.lacking, n.name)
		}
	}
	c.build = MultiBuffer
	if len(c.lacking) > 0 {
		c.build = SingleBuffer
	}
	switch b := Build(os.Getenv(Env)); b {
	case "":
	case MultiBuffer, SingleBuffer:
		c.build = b
	default:
		c.err = fmt.Errorf("%s=%q: not a build (%s or %s)", Env, b, MultiBuffer, SingleBuffer)
	}
	return c
})

// RaiseMemlock lifts RLIMIT_MEMLOCK where this kernel charges BPF maps and
// programs to it (before 5.11; rlimit.RemoveMemlock probes, and changes
// nothing on later kernels), once a process.
var RaiseMemlock = sync.OnceFunc(func() { rlimit.RemoveMemlock() })

// Current is the build of the programs this process loads.
func Current() (Build, error) {
	c := chosenBuild()
	return c.build, c.err
}

// Fallbacks says, in an operator's words, what the single-buffer
// build does differently from the multi-buffer one; nil for the
// multi-buffer build.
func Fallbacks(b Build) []string {
	if b != SingleBuffer {
		return nil
	}
	return []string{
		"no multi-buffer XDP: a driver runs an XDP program only on frames that fit one buffer, so native mode needs an MTU " +
			"of about 3,500 bytes or less (the driver refuses a larger one when attaching); generic mode takes any MTU",
		"no bpf_check_mtu: the too-big check uses outbound_mtu, or each interface's MTU as attach and 'director run' " +
			"read it (when attaching, and on the interface's netlink events)",
	}
}

// Director reads the director object of this kernel's build.
func Director() (*ebpf.CollectionSpec, error) {
	return pick(bpf.LoadDirector, bpf.LoadDirectorSingle)
}

// DirectorOf reads the director object of build b, whatever the kernel.
func DirectorOf(b Build) (*ebpf.CollectionSpec, error) {
	if b == SingleBuffer {
		return bpf.LoadDirectorSingle()
	}
	return bpf.LoadDirector()
}

// Runnable are the builds this kernel can load: both where it has
// multi-buffer XDP (the single-buffer build needs nothing more than the
// kernels before), else the single-buffer one.
func Runnable() []Build {
	if len(chosenBuild().lacking) > 0 {
		return []Build{SingleBuffer}
	}
	return []Build{MultiBuffer, SingleBuffer}
}

// Backend reads the backend object of this kernel's build.
func Backend() (*ebpf.CollectionSpec, error) {
	return pick(bpf.LoadBackend, bpf.LoadBackendSingle)
}

func pick(multi, single func() (*ebpf.CollectionSpec, error)) (*ebpf.CollectionSpec, error) {
	b, err := Current()
	if err != nil {
		return nil, err
	}
	if b == SingleBuffer {
		return single()
	}
	return multi()
}

// Lab is the lab object for this kernel: its pass-all program is
// flagged xdp.frags, and on a kernel without multi-buffer XDP (the
// single-buffer build) it is loaded without the flag; it reads nothing of
// the frame.
func Lab() (*ebpf.CollectionSpec, error) {
	spec, err := bpf.LoadLab()
	if err != nil {
		return nil, err
	}
	if b, err := Current(); err != nil {
		return nil, err
	} else if b == SingleBuffer {
		for _, ps := range spec.Programs {
			ps.Flags &^= unix.BPF_F_XDP_HAS_FRAGS
		}
	}
	return spec, nil
}
