package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// marker starts every line the guest's /init prints for the harness.
const marker = "@@vmtest "

// guestBPFFS is where the guest's report loads a director.
const guestBPFFS = "/sys/fs/bpf/vmtest"

// buildInitramfs writes the guest's root file system: busybox, the
// modules, the director, the test binaries in their packages' places
// beside testdata and docs (the tests open ../testdata), and /init.
func buildInitramfs(out string, u *userland, director, root string, k Kernel, mods []string, pkgs []pkgTests) error {
	r := newInitramfs()
	for _, d := range []string{"proc", "sys", "dev", "tmp", "run", "var/run/netns", "etc"} {
		r.dir(d)
	}
	r.copy("bin/busybox", u.Busybox, 0o755)
	// The applets' links: the host's busybox lists them; one of another
	// arch cannot run here, and links its own from /init.
	r.symlink("bin/sh", "busybox")
	if u.arch.Name == hostArch {
		applets, err := run(u.Busybox, "--list")
		if err != nil {
			return err
		}
		for _, a := range strings.Fields(string(applets)) {
			if a != "busybox" && a != "sh" {
				r.symlink("bin/"+a, "busybox")
			}
		}
	}
	r.copy("bin/director", director, 0o755)
	r.file("etc/hosts", 0o644, []byte("127.0.0.1 localhost\n::1 localhost\n"))
	r.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/tmp:/bin/sh\n"))
	var names []string
	for _, m := range mods {
		name := filepath.Base(m)
		r.copy("lib/modules/vmtest/"+name, m, 0o644)
		names = append(names, strings.TrimSuffix(name, ".ko"))
	}
	// testdata, and docs: tests hold what the tools serve to what the
	// operator's manual says (the metrics' names).
	for _, d := range []string{"testdata", "docs"} {
		if err := r.tree("src/"+d, filepath.Join(root, d)); err != nil {
			return err
		}
	}
	bins := []string{director}
	for _, p := range pkgs {
		r.copy(path.Join("src", p.Rel, path.Base(p.Rel)+".test"), p.Binary, 0o755)
		bins = append(bins, p.Binary)
	}
	libs, err := u.sharedLibs(bins)
	if err != nil {
		return err
	}
	for _, guest := range sortedKeys(libs) {
		r.copy(strings.TrimPrefix(guest, "/"), libs[guest], 0o755)
	}
	r.file("init", 0o755, []byte(initScript(k, u.arch, names, pkgs)))
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := r.write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// initScript is the guest's /init: it mounts what the tests use, loads the
// modules, runs each package's kernel tests, reports what 'director
// status' says of the kernel, and powers off. Every line meant for the
// harness starts with marker.
func initScript(k Kernel, a arch, mods []string, pkgs []pkgTests) string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
/bin/busybox --install -s /bin 2>/dev/null
export LD_LIBRARY_PATH=/lib/` + a.Triplet + `:/usr/lib/` + a.Triplet + `
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /run/netns
mount -t bpf bpf /sys/fs/bpf
ip link set lo up
echo "` + marker + `kernel $(uname -r)"
`)
	for _, m := range mods {
		fmt.Fprintf(&b, "insmod /lib/modules/vmtest/%s.ko || echo \"%sinsmod-failed %s\"\n", m, marker, m)
	}
	b.WriteString(`export DIRECTOR_KERNEL_TESTS=required DIRECTOR_TEST_BINARY=/bin/director DIRECTOR_TEST_TIME_SCALE=4 DIRECTOR_TEST_SIZE_DIVISOR=` + strconv.Itoa(k.sizeDivisor()) + ` HOME=/tmp TMPDIR=/tmp ` + nicEnv() + `
`)
	for _, p := range pkgs {
		fmt.Fprintf(&b, "echo \"%sbegin %s\"\n", marker, p.Rel)
		fmt.Fprintf(&b, "(cd /src/%s && ./%s.test -test.v -test.count=1 -test.timeout=40m -test.run '%s'", p.Rel, path.Base(p.Rel), runPattern(p.Tests))
		for _, a := range p.Args {
			fmt.Fprintf(&b, " '%s'", a)
		}
		fmt.Fprintf(&b, " 2>&1)\necho \"%send %s $?\"\n", marker, p.Rel)
	}
	fmt.Fprintf(&b, `echo "%[1]sstatus-begin"
director load --bpffs %[2]s >/dev/null && director status --json --bpffs %[2]s
director unload --bpffs %[2]s >/dev/null
echo "%[1]sstatus-end"
echo "%[1]sdone"
poweroff -f
`, marker, guestBPFFS)
	return b.String()
}

// qemuArgs boots a kernel and initramfs under TCG: KVM fails on these
// machines, which are virtual themselves (../shared/notes/old-kernels.md).
// No network card of qemu's own (the tests make their own veths, and the
// guest's NICs are nics.go's); a virtio RNG so that nothing waits on
// entropy. loglevel=5 rather than quiet: a soft lockup's stack traces are
// printed at the default level, which quiet hides, and a hung guest without
// them cannot be diagnosed from CI's log.
func qemuArgs(a arch, vmlinuz, initrd string, cpus, memMB int) []string {
	args := append([]string{"-accel", "tcg,thread=multi"}, a.Machine...)
	return append(args, "-smp", strconv.Itoa(cpus), "-m", strconv.Itoa(memMB),
		"-nographic", "-no-reboot", "-nic", "none", "-device", "virtio-rng-pci",
		"-kernel", vmlinuz, "-initrd", initrd,
		"-append", "console="+a.Console+" loglevel=5 softlockup_all_cpu_backtrace=1 panic=-1")
}

// A result is what one guest run showed.
type result struct {
	Kernel  Kernel
	Pkgs    []pkgTests // what the guest was to run
	Package string     // the Debian package booted
	Release string     // uname -r in the guest
	Elapsed time.Duration
	// Passed, Failed and Skipped are top-level tests by package; Missing
	// are kernel tests that did not report at all.
	Passed, Failed, Skipped, Missing map[string][]string
	Subtests                         int // subtests passed
	PkgFailed                        []string
	Problems                         []string // anything else wrong: a module that did not load, no clean end
	KernelLog                        []string // kernel warnings and oopses printed during the run
	// Failures are, for each failed test or subtest, what it logged
	// (first lines), so that a summary that is all one sees of a run
	// says why.
	Failures []string
	Status   string // 'director status --json' in the guest
	Done     bool
}

func (r *result) ok() bool {
	return r.Done && len(r.PkgFailed) == 0 && len(r.Problems) == 0 && count(r.Failed) == 0 && count(r.Skipped) == 0 && count(r.Missing) == 0
}

func count(m map[string][]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

var (
	testLine   = regexp.MustCompile(`^(\s*)--- (PASS|FAIL|SKIP): (\S+) \(`)
	kernelMsg  = regexp.MustCompile(`^\[\s*\d+\.\d+\] `)
	badKernel  = regexp.MustCompile(`WARNING:|BUG:|Oops|Call Trace|general protection|kernel panic|Kernel panic`)
	noise      = regexp.MustCompile(`^=== (RUN|PAUSE|CONT|NAME)\b`)
	testHeader = regexp.MustCompile(`^=== (?:RUN|NAME|CONT)\s+(\S+)`)
	logLine    = regexp.MustCompile(`^\s+\S+_test\.go:\d+: `)
)

// Of each failed test, at most this many of its log lines, each cut to
// failureWidth bytes, are kept.
const (
	failureLines = 6
	failureWidth = 240
)

// console follows a guest's console, line by line.
type console struct {
	r       *result
	pkg     string
	inState bool
	status  strings.Builder
	started bool                // the first marker line has been seen
	current string              // the test whose output this is (=== RUN, NAME, CONT)
	logged  map[string][]string // each test's log lines, the last failureLines of them
}

func newConsole(k Kernel, pkg string) *console {
	return &console{r: &result{Kernel: k, Package: pkg, Passed: map[string][]string{}, Failed: map[string][]string{},
		Skipped: map[string][]string{}, Missing: map[string][]string{}}}
}

// line takes one console line and says whether it is worth showing.
func (p *console) line(l string) bool {
	if rest, ok := strings.CutPrefix(l, marker); ok {
		p.started = true
		f := strings.Fields(rest)
		if len(f) == 0 {
			return false
		}
		switch f[0] {
		case "kernel":
			if len(f) > 1 {
				p.r.Release = f[1]
			}
		case "insmod-failed":
			p.r.Problems = append(p.r.Problems, "module "+strings.Join(f[1:], " ")+" did not load")
		case "begin":
			if len(f) > 1 {
				p.pkg = f[1]
			}
		case "end":
			if len(f) > 2 && f[2] != "0" {
				p.r.PkgFailed = append(p.r.PkgFailed, f[1]+" (exit "+f[2]+")")
			}
			p.pkg = ""
		case "status-begin":
			p.inState = true
			return false
		case "status-end":
			p.inState = false
			p.r.Status = p.status.String()
			return false
		case "done":
			p.r.Done = true
		}
		return true
	}
	if p.inState {
		p.status.WriteString(l + "\n")
		return false
	}
	if kernelMsg.MatchString(l) && badKernel.MatchString(l) {
		p.r.KernelLog = append(p.r.KernelLog, l)
		return true
	}
	if m := testHeader.FindStringSubmatch(l); m != nil {
		p.current = m[1]
	} else if logLine.MatchString(l) && p.current != "" {
		if p.logged == nil {
			p.logged = map[string][]string{}
		}
		lines := p.logged[p.current]
		if len(lines) == failureLines {
			lines = lines[1:]
		}
		line := strings.TrimSpace(l)
		if len(line) > failureWidth {
			line = line[:failureWidth] + "..."
		}
		p.logged[p.current] = append(lines, line)
	}
	if m := testLine.FindStringSubmatch(l); m != nil && p.pkg != "" {
		if m[2] == "FAIL" {
			for _, why := range p.logged[m[3]] {
				p.r.Failures = append(p.r.Failures, m[3]+": "+why)
			}
		}
		delete(p.logged, m[3])
		if m[1] != "" { // a subtest
			if m[2] == "PASS" {
				p.r.Subtests++
			}
			if m[2] == "SKIP" {
				p.r.Skipped[p.pkg] = append(p.r.Skipped[p.pkg], m[3])
			}
			return true
		}
		switch m[2] {
		case "PASS":
			p.r.Passed[p.pkg] = append(p.r.Passed[p.pkg], m[3])
		case "FAIL":
			p.r.Failed[p.pkg] = append(p.r.Failed[p.pkg], m[3])
		case "SKIP":
			p.r.Skipped[p.pkg] = append(p.r.Skipped[p.pkg], m[3])
		}
		return true
	}
	return p.started && !noise.MatchString(l)
}

// finish checks that every kernel test of pkgs reported.
func (p *console) finish(pkgs []pkgTests) {
	for _, pt := range pkgs {
		seen := map[string]bool{}
		for _, m := range []map[string][]string{p.r.Passed, p.r.Failed, p.r.Skipped} {
			for _, n := range m[pt.Rel] {
				seen[n] = true
			}
		}
		for _, n := range pt.Tests {
			if !seen[n] {
				p.r.Missing[pt.Rel] = append(p.r.Missing[pt.Rel], n)
			}
		}
	}
	if !p.r.Done {
		p.r.Problems = append(p.r.Problems, "the guest did not finish its run")
	}
}

// boot runs one guest to its end, or until ctx ends, streaming what is
// worth showing to out (each line prefixed with the kernel's name) and
// everything to the log file.
func boot(ctx context.Context, name string, args []string, k Kernel, pkg string, pkgs []pkgTests, logPath string, out io.Writer) *result {
	p := newConsole(k, pkg)
	p.r.Pkgs = pkgs
	start := time.Now()
	defer func() { p.r.Elapsed = time.Since(start) }()
	logf, err := os.Create(logPath)
	if err != nil {
		p.r.Problems = append(p.r.Problems, err.Error())
		return p.r
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = nil
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		p.r.Problems = append(p.r.Problems, fmt.Sprintf("starting %s: %v", name, err))
		return p.r
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait(); pw.Close() }()
	var tail []string
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := strings.TrimRight(stripEscapes(sc.Text()), "\r")
		fmt.Fprintln(logf, l)
		if tail = append(tail, l); len(tail) > 40 {
			tail = tail[1:]
		}
		if p.line(l) {
			fmt.Fprintf(out, "[%s] %s\n", k.Name, l)
		}
	}
	err = <-waited
	if ctx.Err() != nil {
		p.r.Problems = append(p.r.Problems, fmt.Sprintf("timed out after %s", time.Since(start).Round(time.Second)))
	} else if err != nil {
		p.r.Problems = append(p.r.Problems, fmt.Sprintf("qemu: %v", err))
	}
	p.finish(pkgs)
	if !p.r.Done {
		fmt.Fprintf(out, "[%s] the guest's last lines:\n", k.Name)
		for _, l := range tail {
			fmt.Fprintf(out, "[%s] | %s\n", k.Name, l)
		}
	}
	return p.r
}

var escapes = regexp.MustCompile(`\x1b(\[[0-9;?]*[A-Za-z]|[()][A-Z0-9]|[=>c])`)

// stripEscapes removes the terminal escapes the firmware prints.
func stripEscapes(s string) string { return escapes.ReplaceAllString(s, "") }
