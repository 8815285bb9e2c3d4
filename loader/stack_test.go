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
		m := depths.FindStringSubmatch(coll.Programs["director"].VerifierLog)
		coll.Close()
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
