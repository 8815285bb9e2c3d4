package main

import "strings"

// A Kernel is one the harness boots: a Debian cloud kernel package, which
// has virtio, the serial console, BPF, its JIT and BTF built in.
type Kernel struct {
	// Name is the kernel as README lists it, and as -kernels selects it.
	Name string
	// Package is the Debian package booted.
	Package string
	// Series is the prefix of the packages that may stand in for Package
	// once Debian no longer serves it: the newest of them is booted, and
	// the summary says so.
	Series string
	// Suite is the Debian suite that serves Package when the machine's
	// own sources do not (bullseye for 5.10): it is fetched through an apt
	// configuration of the cache's own, leaving the machine's alone.
	Suite string
	// Optional kernels are booted only when -kernels names them: one
	// being brought up, whose tests do not all pass yet.
	Optional bool
	// SizeDivisor is the guest's DIRECTOR_TEST_SIZE_DIVISOR (testenv.Reduced):
	// 8 when zero. A kernel whose BPF_PROG_RUN is slower under emulation
	// takes a larger one, so that its tests of a few thousand packets
	// each fit the guest's time.
	SizeDivisor int
	// CPUs, when set, is the guest's CPU count instead of -cpus.
	CPUs int
	// Arch is the guest's machine (arch.go): the host's, amd64, when empty.
	Arch string
	// Only, when set, limits the guest to these kernel tests: a package's
	// directory (all of its kernel tests) or a package's directory, a dot
	// and a prefix of test names (internal/lab/testbed.TestNIC). For a
	// guest whose whole run would not fit CI's time.
	Only []string
}

// runs says whether k's guest runs test of package rel.
func (k Kernel) runs(rel, test string) bool {
	if len(k.Only) == 0 {
		return true
	}
	for _, o := range k.Only {
		if o == rel || strings.HasPrefix(rel+"."+test, o) && strings.HasPrefix(o, rel+".") {
			return true
		}
	}
	return false
}

// testsOf is pkgs cut to the tests k runs, without packages left empty.
func (k Kernel) testsOf(pkgs []pkgTests) []pkgTests {
	var out []pkgTests
	for _, p := range pkgs {
		var tests []string
		for _, t := range p.Tests {
			if k.runs(p.Rel, t) {
				tests = append(tests, t)
			}
		}
		if len(tests) > 0 {
			p.Tests = tests
			out = append(out, p)
		}
	}
	return out
}

// sizeDivisor is k's SizeDivisor, 8 when unset.
func (k Kernel) sizeDivisor() int {
	if k.SizeDivisor > 0 {
		return k.SizeDivisor
	}
	return 8
}

// kernels are the kernels 'make test-kernels' boots, the lowest first.
// The development kernel (6.18) is the host's: 'make test' covers it. To
// add one, see docs/development.md, "Older kernels".
var kernels = []Kernel{
	// Debian 11's, from its own suite: the single-buffer build's kernel.
	// Each program load costs it seconds more than 6.1 under TCG (a test
	// that loads one director: 9.7 s, 6.1 2.7 s), so its Go loops are
	// smaller to keep three guests within CI's hour. (Its BPF_PROG_RUN of a
	// program held nowhere cost 6.2 ms, rewriting the XDP dispatcher each
	// run: the loops now hold their program, testrun.Hold, and a run costs
	// 47 µs.) It boots with one CPU: with two, it twice livelocked under
	// TCG while a program was attached or detached under traffic, both
	// CPUs in veth_poll trapping on the XDP dispatcher's entry while it
	// was being rewritten (rcu_sched stall, soft lockup; CI-4's console),
	// which 6.1 and 6.12 never did.
	{Name: "5.10", Package: "linux-image-5.10.0-46-cloud-amd64", Series: "linux-image-5.10.0-", Suite: "bullseye", SizeDivisor: 32, CPUs: 1},
	{Name: "6.1", Package: "linux-image-6.1.0-57-cloud-amd64", Series: "linux-image-6.1.0-"},
	{Name: "6.12", Package: "linux-image-6.12.117+deb12-cloud-amd64", Series: "linux-image-6.12."},
	// Debian 12's on arm64 (Graviton, Ampere): the CPU is emulated whole,
	// slower than the others, so it runs the datapath's own tests (the
	// loader's and the commands') and the NIC tests, native XDP on
	// virtio-net, rather than the testbed's and the service's, which the
	// other kernels run and which hold no arch-specific code of their own.
	{Name: "6.1-arm64", Package: "linux-image-6.1.0-57-cloud-arm64", Series: "linux-image-6.1.0-", Suite: "bookworm", Arch: "arm64",
		Only: []string{"loader", "cmd/director", "internal/lab/testbed.TestNIC"}},
}

// modulesWanted are the modules the guest loads (with what they depend
// on): veth for every veth pair, bridge for the testbed's LAN, virtio_pci
// and virtio_net for the NICs (nics.go), tcp_diag for the socket lookups
// of backend explain (sock_diag; a host's modprobe loads it on demand,
// the guest has none). The cloud kernels build them as modules, but for
// virtio_pci, built into 6.12 (its modules.builtin).
var modulesWanted = []string{"veth", "bridge", "virtio_pci", "virtio_net", "tcp_diag"}
