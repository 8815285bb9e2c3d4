package loader

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/xdpbuild"
)

// TestStackFitsOlderVerifiers: Linux 5.10's and 6.1's verifiers round
// each frame's stack up to 32 bytes and refuse a call whose frames
// together pass 512 ("combined stack size of 2 calls"); this kernel's
// counts them as they are, so a program that loads here can be refused
// there. From this kernel's verifier statistics (each frame's depth,
// the entry's first), the entry's frame with the deepest other one,
// each rounded, must fit, for both builds of the director: the
// single-buffer one is what 5.10 loads, and 6.1 was refused the QUIC
// datapath's first version (352 + 192 bytes) until too_big kept nothing
// on its stack.
func TestStackFitsOlderVerifiers(t *testing.T) {
	testenv.Kernel(t)
	depths := regexp.MustCompile(`stack depth ([0-9+]+)`)
	for _, b := range xdpbuild.Runnable() {
		m := depths.FindStringSubmatch(verifierStats(t, b))
		if m == nil {
			t.Fatalf("%s: no stack depth in the verifier's statistics", b)
		}
		var frames []int
		for _, f := range strings.Split(m[1], "+") {
			n, _ := strconv.Atoi(f)
			frames = append(frames, (max(n, 1)+31)/32*32)
		}
		deepest := 0
		for _, f := range frames[1:] {
			deepest = max(deepest, f)
		}
		t.Logf("%s: stack depth %s, rounded %v: %d of 512 in a call", b, m[1], frames, frames[0]+deepest)
		if frames[0]+deepest > 512 {
			t.Errorf("%s: the entry's frame (%d, rounded) and its deepest callee's (%d) take %d bytes: older verifiers refuse over 512",
				b, frames[0], deepest, frames[0]+deepest)
		}
	}
}

// verifierStats loads build b's director and returns the verifier's
// statistics for it.
func verifierStats(t *testing.T, b xdpbuild.Build) string {
	t.Helper()
	spec, err := xdpbuild.DirectorOf(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := bpf.CaptureAsMap(spec); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	defer coll.Close()
	return coll.Programs["director"].VerifierLog
}

// TestVerifierHasHeadroom: the verifier walks every path of the program
// whose state it cannot prune, and refuses it past a million instructions
// (E2BIG, "BPF program is too large"), a limit each kernel's verifier
// reaches at a different size: the first build of the history hops took
// 1,000,001 on 5.10 and 391k here. Run on every kernel 'make
// test-kernels' boots, this fails while there is still room, at 70%, so
// that the next path added is noticed before a kernel refuses to load.
func TestVerifierHasHeadroom(t *testing.T) {
	testenv.Kernel(t)
	processed := regexp.MustCompile(`processed ([0-9]+) insns`)
	took := regexp.MustCompile(`verification time ([0-9]+) usec`)
	for _, b := range xdpbuild.Runnable() {
		stats := verifierStats(t, b)
		m := processed.FindStringSubmatch(stats)
		if m == nil {
			t.Fatalf("%s: no instruction count in the verifier's statistics", b)
		}
		n, _ := strconv.Atoi(m[1])
		us := "?"
		if m := took.FindStringSubmatch(stats); m != nil {
			us = m[1]
		}
		t.Logf("%s: the verifier processed %d instructions of its 1,000,000, in %s µs", b, n, us)
		if n > 700_000 {
			t.Errorf("%s: the verifier processed %d instructions, over 70%% of its limit of 1,000,000: "+
				"find the paths it cannot prune (a branch whose two sides differ until the end of the program)", b, n)
		}
	}
}
