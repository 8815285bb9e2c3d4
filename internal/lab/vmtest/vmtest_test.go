package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestInitramfsUnpacks: what the harness writes, busybox's cpio (the
// guest's own) unpacks into the same files, links and modes.
func TestInitramfsUnpacks(t *testing.T) {
	cpio, err := exec.LookPath("cpio")
	args := []string{"-idm", "--quiet"}
	if err != nil {
		if _, berr := os.Stat("/bin/busybox"); berr != nil {
			t.Skip("neither cpio nor /bin/busybox (busybox-static) is installed")
		}
		cpio, args = "/bin/busybox", []string{"cpio", "-idm"}
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "copied"), []byte("from the host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newInitramfs()
	r.file("init", 0o755, []byte("#!/bin/sh\n"))
	r.file("a/b/odd", 0o644, []byte("12345")) // lengths that need padding
	r.copy("c/copied", filepath.Join(src, "copied"), 0o640)
	r.symlink("bin/sh", "busybox")
	r.dir("empty/dir")
	var gz bytes.Buffer
	if err := r.write(&gz); err != nil {
		t.Fatal(err)
	}
	z, err := gzip.NewReader(&gz)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	cmd := exec.Command(cpio, args...)
	cmd.Dir, cmd.Stdin = dst, z
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cpio, err, out)
	}
	for name, want := range map[string]struct {
		data string
		perm os.FileMode
	}{"init": {"#!/bin/sh\n", 0o755}, "a/b/odd": {"12345", 0o644}, "c/copied": {"from the host\n", 0o640}} {
		p := filepath.Join(dst, name)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(p)
		if string(data) != want.data || fi.Mode().Perm() != want.perm {
			t.Errorf("%s: %q %v, want %q %v", name, data, fi.Mode().Perm(), want.data, want.perm)
		}
	}
	if l, err := os.Readlink(filepath.Join(dst, "bin/sh")); err != nil || l != "busybox" {
		t.Errorf("bin/sh: %q %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "empty/dir")); err != nil || !fi.IsDir() {
		t.Errorf("empty/dir: %v", err)
	}
}

func TestParseDepends(t *testing.T) {
	info := []byte("license=GPL\x00depends=llc,stp\x00retpoline=Y\x00intree=Y\x00name=bridge\x00")
	if got := parseDepends(info); !slices.Equal(got, []string{"llc", "stp"}) {
		t.Errorf("bridge: %v", got)
	}
	if got := parseDepends([]byte("depends=\x00name=veth\x00")); len(got) != 0 {
		t.Errorf("veth: %v", got)
	}
}

func TestModuleName(t *testing.T) {
	for file, want := range map[string]string{"veth.ko": "veth", "nf-conntrack.ko.xz": "nf_conntrack", "llc.ko.zst": "llc"} {
		if got, ok := moduleName(file); !ok || got != want {
			t.Errorf("%s: %q %v", file, got, ok)
		}
	}
	if _, ok := moduleName("modules.dep"); ok {
		t.Error("modules.dep taken for a module")
	}
}

// TestKernelTestsFound: a Test function that calls testenv.Kernel is a
// kernel test, wherever in its body, and so is one that calls a helper
// (of any of the package's test files) that does; the rest are not.
func TestKernelTestsFound(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"a_test.go": `package x
func TestA(t *testing.T) { testenv.Kernel(t); _ = 1 }
func TestB(t *testing.T) { if true { testenv.Kernel(t) } }
func TestC(t *testing.T) { other.Kernel(t) }
func TestD(t *testing.T) { newBed(t) }
func TestMain(m *testing.M) { testenv.Kernel(nil) }
`, "b_test.go": `package x
func newBed(t *testing.T) { helper(t) }
func helper(t *testing.T) { testenv.Kernel(t) }
func TestE(t *testing.T) { notKernel() }
func notKernel() {}
`}
	var paths []string
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	got, err := kernelTests(paths...)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"TestA", "TestB", "TestD"}) {
		t.Errorf("kernel tests %v", got)
	}
}

// TestDiscoverTheModule: the module's own kernel tests are found, the
// host-only ones among them with their reasons, and every kernel test is
// one or the other.
func TestDiscoverTheModule(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := discover(root)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, p := range pkgs {
		for _, n := range p.Tests {
			found[p.Rel+"."+n] = true
		}
		for _, s := range p.Skipped {
			name, _, _ := strings.Cut(s, ":")
			found[p.Rel+"."+name] = true
		}
	}
	for _, want := range []string{"loader.TestGoldenPackets", "loader.TestDatapathMatchesModel", "loader.TestBindSweep",
		"loader.TestBackendProgram", "internal/lab/testbed.TestDrainWithoutBreakingConnections", "internal/lab/testbed.TestRun",
		"internal/lab/testbed.TestFleetFailures", "internal/service.TestRunEmptyConfig"} {
		if !found[want] {
			t.Errorf("%s is not found", want)
		}
	}
}

// TestConsoleVerdicts: a guest's run passes only when every kernel test
// passed, none skipped (a subtest included), and the guest finished.
func TestConsoleVerdicts(t *testing.T) {
	pkgs := []pkgTests{{Rel: "loader", Tests: []string{"TestA", "TestB"}}}
	run := func(lines string) *result {
		c := newConsole(kernels[0], kernels[0].Package)
		for _, l := range strings.Split(lines, "\n") {
			c.line(l)
		}
		c.finish(pkgs)
		return c.r
	}
	good := marker + "kernel 6.1.0-57-cloud-amd64\n" + marker + "begin loader\n=== RUN   TestA\n--- PASS: TestA (0.1s)\n" +
		"--- PASS: TestB (0.2s)\n    --- PASS: TestB/x (0.1s)\nPASS\n" + marker + "end loader 0\n" +
		marker + "status-begin\n{\"kernel\": {\"release\": \"6.1.0-57-cloud-amd64\", \"missing\": []}}\n" + marker + "status-end\n" + marker + "done"
	r := run(good)
	if !r.ok() || r.Release != "6.1.0-57-cloud-amd64" || r.Subtests != 1 || len(r.Passed["loader"]) != 2 {
		t.Fatalf("a good run: %+v", r)
	}
	if got := kernelReport(r.Status); got != "director status: kernel 6.1.0-57-cloud-amd64 has everything the programs use" {
		t.Errorf("report: %s", got)
	}
	old := `{"kernel": {"release": "5.10.0-46-cloud-amd64", "missing": [], "build": "single-buffer", "lacking": ["helper bpf_check_mtu", "multi-buffer XDP (xdp.frags)"]}}`
	if got := kernelReport(old); got != "director status: kernel 5.10.0-46-cloud-amd64 has everything the programs use, "+
		"single-buffer build (lacking helper bpf_check_mtu, multi-buffer XDP (xdp.frags))" {
		t.Errorf("report: %s", got)
	}
	for name, lines := range map[string]string{
		"a skipped subtest": strings.Replace(good, "--- PASS: TestB/x", "--- SKIP: TestB/x", 1),
		"a skipped test":    strings.Replace(good, "--- PASS: TestA", "--- SKIP: TestA", 1),
		"a failed test":     strings.Replace(good, "--- PASS: TestA", "--- FAIL: TestA", 1),
		"a test missing":    strings.Replace(good, "--- PASS: TestB (0.2s)\n", "", 1),
		"no end":            strings.Replace(good, marker+"done", "", 1),
		"a package failed":  strings.Replace(good, "end loader 0", "end loader 1", 1),
		"a module missing":  strings.Replace(good, marker+"begin", marker+"insmod-failed veth\n"+marker+"begin", 1),
	} {
		if r := run(lines); r.ok() {
			t.Errorf("%s: the run passed", name)
		}
	}
}

// TestConsoleFailures: the summary says why a test failed, from what the
// failing test logged, and nothing of what passing ones logged.
func TestConsoleFailures(t *testing.T) {
	c := newConsole(kernels[0], kernels[0].Package)
	// As go test -v prints it: a subtest's result comes after its
	// siblings' output, with its parent's.
	for _, l := range strings.Split(marker+"begin testbed\n=== RUN   TestA\n    a_test.go:5: fine\n--- PASS: TestA (0.1s)\n"+
		"=== RUN   TestB\n=== RUN   TestB/sub\n    b_test.go:10: waited 3s: not served\n=== RUN   TestB/next\n    b_test.go:20: took 1s\n"+
		"=== NAME  TestB\n    b_test.go:11: log:\n        more output\n--- FAIL: TestB (1.0s)\n    --- FAIL: TestB/sub (0.9s)\n"+
		"    --- PASS: TestB/next (0.1s)\nFAIL\n"+marker+"end testbed 1", "\n") {
		c.line(l)
	}
	want := []string{"TestB: b_test.go:11: log:", "TestB/sub: b_test.go:10: waited 3s: not served"}
	if !slices.Equal(c.r.Failures, want) {
		t.Fatalf("failures %q, want %q", c.r.Failures, want)
	}
	var out strings.Builder
	summary(&out, []*result{c.r}, time.Second)
	if !strings.Contains(out.String(), "why: TestB/sub: b_test.go:10: waited 3s: not served") {
		t.Fatalf("the summary does not say why:\n%s", out.String())
	}
}

func TestStripEscapes(t *testing.T) {
	if got := stripEscapes("\x1bc\x1b[?7l\x1b[2JGUEST: Linux\x1b[0m"); got != "GUEST: Linux" {
		t.Errorf("%q", got)
	}
}
