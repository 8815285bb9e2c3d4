// Package testenv tells tests whether this machine can run the kernel
// tests: those that load BPF programs, attach them and make network
// namespaces. Where it cannot, such a test skips, saying why, so that
// 'go test ./...' as a normal user runs the rest. DIRECTOR_KERNEL_TESTS=
// required (set by 'make test' and CI) turns every such skip into a
// failure: there, a kernel test that does not run is a test that failed.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Required is the value of DIRECTOR_KERNEL_TESTS that makes missing
// privileges a failure rather than a skip.
const Required = "required"

// Capabilities the kernel tests use: loading BPF and attaching XDP
// (CAP_BPF, CAP_NET_ADMIN), reading program statistics and pointers
// (CAP_PERFMON), network and mount namespaces and bpffs (CAP_SYS_ADMIN).
var needed = []struct {
	bit  int
	name string
}{
	{unix.CAP_BPF, "CAP_BPF"}, {unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"},
	{unix.CAP_PERFMON, "CAP_PERFMON"}, {unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"},
}

// Kernel skips tb (or, with DIRECTOR_KERNEL_TESTS=required, fails it)
// unless this process can run kernel tests.
func Kernel(tb testing.TB) {
	tb.Helper()
	if why := missing(); why != "" {
		if os.Getenv("DIRECTOR_KERNEL_TESTS") == Required {
			tb.Fatalf("%s, and DIRECTOR_KERNEL_TESTS=required: kernel tests must run here (as root)", why)
		}
		tb.Skipf("%s: run the kernel tests as root ('make test' does, and fails rather than skips)", why)
	}
}

// missing says what this process lacks for the kernel tests, or "".
func missing() string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return "cannot read this process's capabilities: " + err.Error()
	}
	var lack []string
	for _, c := range needed {
		if data[c.bit/32].Effective&(1<<(c.bit%32)) == 0 {
			lack = append(lack, c.name)
		}
	}
	if len(lack) > 0 {
		return "this kernel test needs " + join(lack) + ", which this process lacks"
	}
	return ""
}

func join(s []string) string {
	out := s[0]
	for i, x := range s[1:] {
		if i == len(s)-2 {
			out += " and " + x
		} else {
			out += ", " + x
		}
	}
	return out
}

// Scaled is d, the time a test allows something that takes real time,
// multiplied by DIRECTOR_TEST_TIME_SCALE (a whole number; 1 when unset).
// The guest kernels 'make test-kernels' boots run on an emulated CPU,
// several times slower, and set it: there the tests check what the kernel
// does, and the host's 'make test' checks how fast.
func Scaled(d time.Duration) time.Duration {
	n, err := strconv.Atoi(os.Getenv("DIRECTOR_TEST_TIME_SCALE"))
	if err != nil || n < 1 {
		return d
	}
	return d * time.Duration(n)
}

// Reduced is n, the size of a test's workload (packets, flows, clients),
// divided by DIRECTOR_TEST_SIZE_DIVISOR (a whole number; 1 when unset),
// and at least 1. The emulated guests of 'make test-kernels' set it: a Go
// loop runs some 30 times slower there, and what the guests check is what
// each kernel does, which a few thousand packets show as well as a hundred
// thousand. The host's 'make test' runs the full sizes.
func Reduced(n int) int {
	d, err := strconv.Atoi(os.Getenv("DIRECTOR_TEST_SIZE_DIVISOR"))
	if err != nil || d < 1 {
		return n
	}
	return max(1, n/d)
}

// Libpcap skips tb (or, with DIRECTOR_KERNEL_TESTS=required, fails it)
// when err says libpcap, which compiles capture filter expressions, could
// not be loaded: 'make test' and CI install it.
func Libpcap(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv("DIRECTOR_KERNEL_TESTS") == Required {
		tb.Fatalf("%v, and DIRECTOR_KERNEL_TESTS=required", err)
	}
	tb.Skip(err)
}

// Browser is the headless browser that renders the status page in tests
// (Debian's chromium): its path, or a skip (with
// DIRECTOR_KERNEL_TESTS=required, a failure) when there is none. 'make
// test' and CI install it.
func Browser(tb testing.TB) string {
	tb.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("DIRECTOR_KERNEL_TESTS") == Required {
		tb.Fatal("no chromium to render the status page in, and DIRECTOR_KERNEL_TESTS=required (apt-get install chromium)")
	}
	tb.Skip("no chromium to render the status page in (apt-get install chromium)")
	return ""
}

var pinDirs atomic.Int64

// PinDir is a bpffs directory for a test's pins, named by prefix, this
// process and a count: unique among the tests of every package running at
// once (t.TempDir's last element is the same "001" in each).
func PinDir(prefix string) string {
	return filepath.Join("/sys/fs/bpf", fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), pinDirs.Add(1)))
}

// NICs are the real NICs a test may take for its own, at least n of them:
// DIRECTOR_TEST_NICS names them (space-separated), all on one Ethernet
// segment that nothing else uses. The guests of 'make test-kernels' have
// virtio-net NICs so (internal/lab/vmtest, nics.go) and set
// DIRECTOR_NIC_TESTS=required, which turns a missing NIC into a failure.
// Elsewhere the test skips, saying why; 'make test' leaves the NIC tests
// (TestNIC...) to the guests rather than skip them on a host without NICs.
func NICs(tb testing.TB, n int) []string {
	tb.Helper()
	Kernel(tb)
	nics := strings.Fields(os.Getenv("DIRECTOR_TEST_NICS"))
	if len(nics) >= n {
		return nics[:n]
	}
	why := fmt.Sprintf("this test needs %d NICs of its own on one segment, and DIRECTOR_TEST_NICS names %d", n, len(nics))
	if os.Getenv("DIRECTOR_NIC_TESTS") == Required {
		tb.Fatalf("%s, and DIRECTOR_NIC_TESTS=required", why)
	}
	tb.Skipf("%s: 'make test-kernels' runs it in guests that have them", why)
	return nil
}

// SingleQueueNIC is a NIC with one queue pair, on a segment of its own
// (DIRECTOR_TEST_NIC_SINGLE_QUEUE), as NICs.
func SingleQueueNIC(tb testing.TB) string {
	tb.Helper()
	Kernel(tb)
	if nic := os.Getenv("DIRECTOR_TEST_NIC_SINGLE_QUEUE"); nic != "" {
		return nic
	}
	why := "this test needs a single-queue NIC of its own (DIRECTOR_TEST_NIC_SINGLE_QUEUE)"
	if os.Getenv("DIRECTOR_NIC_TESTS") == Required {
		tb.Fatalf("%s, and DIRECTOR_NIC_TESTS=required", why)
	}
	tb.Skipf("%s: 'make test-kernels' runs it in guests that have one", why)
	return ""
}
