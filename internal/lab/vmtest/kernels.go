package main

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
	// run: the loops now hold their program, lab.Hold, and a run costs
	// 47 µs.) It boots with one CPU: with two, it twice livelocked under
	// TCG while a program was attached or detached under traffic, both
	// CPUs in veth_poll trapping on the XDP dispatcher's entry while it
	// was being rewritten (rcu_sched stall, soft lockup; CI-4's console),
	// which 6.1 and 6.12 never did.
	{Name: "5.10", Package: "linux-image-5.10.0-46-cloud-amd64", Series: "linux-image-5.10.0-", Suite: "bullseye", SizeDivisor: 32, CPUs: 1},
	{Name: "6.1", Package: "linux-image-6.1.0-57-cloud-amd64", Series: "linux-image-6.1.0-"},
	{Name: "6.12", Package: "linux-image-6.12.117+deb12-cloud-amd64", Series: "linux-image-6.12."},
}

// modulesWanted are the modules the guest loads (with what they depend
// on): veth for every veth pair, bridge for the testbed's LAN, virtio_pci
// and virtio_net for the NICs (nics.go), tcp_diag for the socket lookups
// of backend explain (sock_diag; a host's modprobe loads it on demand,
// the guest has none). The cloud kernels build them as modules, but for
// virtio_pci, built into 6.12 (its modules.builtin).
var modulesWanted = []string{"veth", "bridge", "virtio_pci", "virtio_net", "tcp_diag"}
