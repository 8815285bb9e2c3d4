package loader

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/xdpbuild"
)

// TestStackFitsOlderVerifiers: Linux 5.10's and 6.1's verifiers round
// each frame's stack up to 32 bytes and refuse a chain of calls whose
// frames together pass 512 ("combined stack size of 3 calls is 544");
// this kernel's counts them as they are, so a program that loads here can
// be refused there. From this kernel's verifier statistics (each
// function's depth, in the order of their first instructions) and the
// calls in the program as loaded, every chain of calls from the entry,
// each frame rounded, must fit, for both builds of the director: the
// single-buffer one is what 5.10 loads. 6.1 was refused the QUIC
// datapath's first version (352 + 192 bytes) until too_big kept nothing
// on its stack, and 5.10 the per-table counters' first version (the
// entry's 352, the decryption's 128 and its AES rounds' 64).
func TestStackFitsOlderVerifiers(t *testing.T) {
	testenv.Kernel(t)
	depths := regexp.MustCompile(`stack depth ([0-9+]+)`)
	for _, b := range xdpbuild.Runnable() {
		stats, calls := verifierStatsAndCalls(t, b)
		m := depths.FindStringSubmatch(stats)
		if m == nil {
			t.Fatalf("%s: no stack depth in the verifier's statistics", b)
		}
		var frames []int
		for _, f := range strings.Split(m[1], "+") {
			n, _ := strconv.Atoi(f)
			frames = append(frames, (max(n, 1)+31)/32*32)
		}
		if len(calls) != len(frames) {
			t.Fatalf("%s: %d functions in the program, %d stack depths", b, len(calls), len(frames))
		}
		// The deepest chain from each function, callees first: a call
		// goes forward or back, so memoise over the graph (it has no
		// recursion; the verifier refuses that).
		deepest := make([]int, len(frames))
		var chain func(f int, seen int) int
		chain = func(f int, seen int) int {
			if deepest[f] > 0 || seen > len(frames) {
				return deepest[f]
			}
			d := 0
			for _, c := range calls[f] {
				d = max(d, chain(c, seen+1))
			}
			deepest[f] = frames[f] + d
			return deepest[f]
		}
		total := chain(0, 0)
		t.Logf("%s: stack depth %s, rounded %v: %d of 512 in the deepest chain of calls", b, m[1], frames, total)
		if total > 512 {
			t.Errorf("%s: a chain of calls takes %d bytes of stack, rounded: older verifiers refuse over 512", b, total)
		}
	}
}

// verifierStatsAndCalls loads build b's director and returns the
// verifier's statistics for it and, for each of its functions in the
// order of their first instructions (the verifier's), the functions it
// calls.
func verifierStatsAndCalls(t *testing.T, b xdpbuild.Build) (string, [][]int) {
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
	prog := coll.Programs["director"]
	// The program's functions as the ELF links them, in order (the
	// verifier's), each starting at an instruction that names it.
	var names []string
	index := map[string]int{}
	var refs [][]string
	for _, ins := range spec.Programs["director"].Instructions {
		if sym := ins.Symbol(); sym != "" {
			index[sym] = len(names)
			names = append(names, sym)
			refs = append(refs, nil)
		}
		if ins.IsFunctionCall() && len(refs) > 0 {
			refs[len(refs)-1] = append(refs[len(refs)-1], ins.Reference())
		}
	}
	calls := make([][]int, len(names))
	for f, rs := range refs {
		for _, r := range rs {
			g, ok := index[r]
			if !ok {
				t.Fatalf("%s: %s calls %q, which is not in the program", b, names[f], r)
			}
			if !slices.Contains(calls[f], g) {
				calls[f] = append(calls[f], g)
			}
		}
	}
	return prog.VerifierLog, calls
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
		stats, _ := verifierStatsAndCalls(t, b)
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
