package testenv

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/director/director/loader/testrun"
)

// Hold keeps p in the kernel's XDP dispatcher (testrun.Hold) until tb ends,
// for a test that runs many frames through it one BPF_PROG_RUN at a time:
// on Linux 5.10 each run of a program held nowhere costs milliseconds.
func Hold(tb testing.TB, p *ebpf.Program) {
	tb.Helper()
	release, err := testrun.Hold(p)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(release)
}
