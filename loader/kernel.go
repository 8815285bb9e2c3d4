package loader

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/director/director/loader/xdpbuild"
)

// TestedKernels are the kernels every test runs on: 'make test-kernels'
// boots the first three under qemu, and the last is the development
// machine's ('make test'). README lists the same.
var TestedKernels = []string{"5.10", "6.1", "6.12", "6.18"}

// KernelSupport is what the running kernel offers of what the programs
// use. What they use is read from the embedded objects themselves (each
// program's type, flags and helper calls, each map's type), so it cannot
// drift from the C.
type KernelSupport struct {
	// Release is the kernel's, as uname -r gives it.
	Release string `json:"release"`
	// Missing is what a program uses that this kernel lacks, as
	// "PROGRAM: WHAT" ("backend: helper bpf_skc_lookup_tcp"); empty when
	// it lacks nothing. A director whose own program needs something
	// missing does not load, and says why.
	Missing []string `json:"missing"`
	// Build is the build of the programs this kernel runs (bpf/build.h):
	// multi-buffer, or single-buffer where the kernel lacks what the
	// first uses (Lacking).
	Build xdpbuild.Build `json:"build"`
	// Lacking is what the kernel lacks of the multi-buffer build's
	// needs, and Fallbacks what the single-buffer build does instead, in
	// an operator's words; both empty for the multi-buffer build.
	Lacking   []string `json:"lacking"`
	Fallbacks []string `json:"fallbacks"`
}

// ProbeKernel checks the running kernel for everything the three
// programs (director, backend, lab) use.
func ProbeKernel() (*KernelSupport, error) {
	raiseMemlock() // the probes make maps
	build, err := xdpbuild.Current()
	if err != nil {
		return nil, err
	}
	ks := &KernelSupport{Release: kernelRelease(), Missing: []string{}, Build: build, Lacking: xdpbuild.Lacking(),
		Fallbacks: xdpbuild.Fallbacks(build)}
	if ks.Lacking == nil {
		ks.Lacking = []string{}
	}
	if ks.Fallbacks == nil {
		ks.Fallbacks = []string{}
	}
	for _, o := range []struct {
		name string
		load func() (*ebpf.CollectionSpec, error)
	}{{"director", directorSpec}, {"backend", xdpbuild.Backend}, {"lab", xdpbuild.Lab}} {
		spec, err := o.load()
		if err != nil {
			return nil, fmt.Errorf("reading the embedded %s object: %w", o.name, err)
		}
		missing, err := lacks(spec)
		if err != nil {
			return nil, err
		}
		for _, m := range missing {
			ks.Missing = append(ks.Missing, o.name+": "+m)
		}
	}
	return ks, nil
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// lacks lists what spec's programs and maps use that this kernel does not
// have. The probes' answers are cached for the process.
func lacks(spec *ebpf.CollectionSpec) ([]string, error) {
	set := map[string]bool{}
	probe := func(what string, err error) error {
		switch {
		case err == nil:
		case errors.Is(err, ebpf.ErrNotSupported):
			set[what] = true
		default:
			return fmt.Errorf("probing the kernel for %s: %w", what, err)
		}
		return nil
	}
	for _, ms := range spec.Maps {
		for m := ms; m != nil; m = m.InnerMap {
			if err := probe("map type "+m.Type.String(), features.HaveMapType(m.Type)); err != nil {
				return nil, err
			}
		}
	}
	for _, ps := range spec.Programs {
		if err := probe("program type "+ps.Type.String(), features.HaveProgramType(ps.Type)); err != nil {
			return nil, err
		}
		if ps.Type == ebpf.XDP && ps.Flags&unix.BPF_F_XDP_HAS_FRAGS != 0 {
			if err := probe("multi-buffer XDP (xdp.frags)", xdpbuild.HaveXDPFrags()); err != nil {
				return nil, err
			}
		}
		for _, ins := range ps.Instructions {
			if !ins.IsBuiltinCall() {
				continue
			}
			fn := asm.BuiltinFunc(ins.Constant)
			if err := probe("helper "+helperName(fn), features.HaveProgramHelper(ps.Type, fn)); err != nil {
				return nil, err
			}
		}
	}
	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	sort.Strings(out)
	return out, nil
}

// helperName is a helper's name as the kernel's documentation gives it:
// FnXdpGetBuffLen is bpf_xdp_get_buff_len.
func helperName(fn asm.BuiltinFunc) string {
	var b strings.Builder
	b.WriteString("bpf")
	for _, r := range strings.TrimPrefix(fn.String(), "Fn") {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// explainLoad adds to a program's load failure what this kernel lacks of
// what spec uses, if anything: that, not the verifier's log, is what an
// operator on an old kernel needs to read.
func explainLoad(spec *ebpf.CollectionSpec, err error) error {
	missing, perr := lacks(spec)
	if perr != nil || len(missing) == 0 {
		return err
	}
	return fmt.Errorf("this kernel (%s) lacks %s, which the program uses; director is tested on Linux %s: %w",
		kernelRelease(), strings.Join(missing, ", "), strings.Join(TestedKernels, ", "), err)
}

// capsUsed are the capabilities the loader's work needs: loading and
// reading BPF objects (CAP_BPF), XDP and netlink (CAP_NET_ADMIN), reading
// map and program IDs back (CAP_PERFMON) and mounting bpffs
// (CAP_SYS_ADMIN).
var capsUsed = []struct {
	bit  int
	name string
}{{unix.CAP_BPF, "CAP_BPF"}, {unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"}, {unix.CAP_PERFMON, "CAP_PERFMON"}, {unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"}}

// missingCaps names the capabilities of capsUsed this process lacks.
func missingCaps() []string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil
	}
	var out []string
	for _, c := range capsUsed {
		if data[c.bit/32].Effective&(1<<(c.bit%32)) == 0 {
			out = append(out, c.name)
		}
	}
	return out
}

// privilegeError is err, when it is the kernel's refusal for want of
// privileges, said as what is missing: "permission denied" or cilium's
// MEMLOCK hint tell an operator nothing. Other errors are returned as
// they are.
func privilegeError(what string, err error) error {
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		return err
	}
	missing := missingCaps()
	if len(missing) == 0 {
		return err // privileged, and refused anyway: the error says why
	}
	errno := unix.EPERM
	if errors.Is(err, unix.EACCES) {
		errno = unix.EACCES
	}
	return fmt.Errorf("%s needs root, or %s, which this process lacks: %w", what, strings.Join(missing, ", "), errno)
}
