// Command vmtest is 'make test-kernels': it boots each kernel operators
// run director on (kernels.go) under qemu and runs every kernel test of
// the module inside it, as root, with DIRECTOR_KERNEL_TESTS=required, so
// that a test skipped in a guest fails the run as it does on the host.
//
// It downloads the Debian kernel packages (apt-get download) into a cache
// it keeps across runs, builds static test binaries and the director,
// packs them with busybox, the kernel's veth, bridge and virtio-net
// modules and testdata into an initramfs, and boots it under TCG (KVM does
// not work on the machines CI runs on) with virtio-net NICs of its own
// (nics.go). Lab code: the product never imports it.
package main

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	var (
		only     = flag.String("kernels", "", "comma-separated kernels to boot (default: all of "+kernelNames()+")")
		cache    = flag.String("cache", defaultCache(), "where kernel packages are kept across runs ($DIRECTOR_KERNEL_CACHE)")
		work     = flag.String("work", "", "working directory (default: a temporary one, removed after a run that passed)")
		timeout  = flag.Duration("timeout", 60*time.Minute, "the longest one guest may run")
		parallel = flag.Int("parallel", 3, "guests booted at once")
		cpus     = flag.Int("cpus", 2, "CPUs per guest")
		mem      = flag.Int("mem", 3072, "MiB of memory per guest")
		run      = flag.String("run", "", "run only the kernel tests whose names match this regular expression (a quick look; the whole set is the test)")
	)
	flag.Parse()
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vmtest: -run: %v\n", err)
			os.Exit(2)
		}
		only := re
		testFilter = func(name string) bool { return only.MatchString(name) }
	}
	if err := runAll(*only, *cache, *work, *timeout, *parallel, *cpus, *mem, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "vmtest: %v\n", err)
		os.Exit(1)
	}
}

func kernelNames() string {
	var n []string
	for _, k := range kernels {
		if k.Optional {
			n = append(n, k.Name+" (only when named)")
		} else {
			n = append(n, k.Name)
		}
	}
	return strings.Join(n, ", ")
}

func defaultCache() string {
	if d := os.Getenv("DIRECTOR_KERNEL_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "director", "kernels")
	}
	return filepath.Join(os.TempDir(), "director-kernels")
}

func selectKernels(only string) ([]Kernel, error) {
	if only == "" {
		var out []Kernel
		for _, k := range kernels {
			if !k.Optional {
				out = append(out, k)
			}
		}
		return out, nil
	}
	var out []Kernel
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, k := range kernels {
			if k.Name == name {
				out, found = append(out, k), true
			}
		}
		if !found {
			return nil, fmt.Errorf("-kernels: no kernel %q (there are %s)", name, kernelNames())
		}
	}
	return out, nil
}

// tools finds what the harness runs, saying which Debian package has what
// is missing.
func tools() (qemu, busybox string, err error) {
	for tool, pkg := range map[string]string{"qemu-system-x86_64": "qemu-system-x86", "dpkg-deb": "dpkg", "apt-get": "apt",
		"xz": "xz-utils", "go": "Go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", "", fmt.Errorf("%s not found: install %s", tool, pkg)
		}
	}
	qemu, _ = exec.LookPath("qemu-system-x86_64")
	busybox = "/bin/busybox"
	f, err := elf.Open(busybox)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w (install busybox-static)", busybox, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", "", fmt.Errorf("%s is dynamically linked; the guest needs a static one (install busybox-static)", busybox)
		}
	}
	return qemu, busybox, nil
}

func runAll(only, cache, work string, timeout time.Duration, parallel, cpus, mem int, out io.Writer) error {
	start := time.Now()
	ks, err := selectKernels(only)
	if err != nil {
		return err
	}
	r := &vmRun{cache: cache, work: work, timeout: timeout, parallel: parallel, cpus: cpus, mem: mem, out: out}
	if r.qemu, r.busybox, err = tools(); err != nil {
		return err
	}
	if r.root, err = moduleRoot(); err != nil {
		return err
	}
	keep := work != ""
	if work == "" {
		if r.work, err = os.MkdirTemp("", "director-vmtest-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(r.work, 0o755); err != nil {
		return err
	}
	// The packages first: a fresh machine's run spends its first seconds
	// here, and a failure should come before the build.
	if err := r.fetch(ks); err != nil {
		return err
	}
	if err := r.build(); err != nil {
		return err
	}
	results, err := r.bootAll(ks)
	if err != nil {
		return err
	}
	if summary(out, results, r.pkgs, time.Since(start)) {
		return fmt.Errorf("a kernel failed; the guests' whole consoles are in %s", r.work)
	}
	if !keep {
		os.RemoveAll(r.work)
	}
	return nil
}

// vmRun is one make test-kernels: the tools, the packages fetched per
// kernel, and the test binaries every guest runs.
type vmRun struct {
	cache, work    string
	timeout        time.Duration
	parallel, cpus int
	mem            int
	out            io.Writer
	qemu, busybox  string
	root           string
	debs           map[string]fetched
	pkgs           []pkgTests
	director       string // the static director binary
}

type fetched struct {
	deb, pkg string
}

func (r *vmRun) fetch(ks []Kernel) error {
	r.debs = map[string]fetched{}
	for _, k := range ks {
		deb, pkg, err := fetchKernel(r.cache, k, r.out)
		if err != nil {
			return err
		}
		r.debs[k.Name] = fetched{deb, pkg}
	}
	return nil
}

// build finds the kernel tests and builds them and the director, static.
func (r *vmRun) build() error {
	var err error
	if r.pkgs, err = discover(r.root); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "vmtest: building the director and %d test binaries (no cgo)\n", len(r.pkgs))
	if r.director, err = buildAll(r.root, filepath.Join(r.work, "bin"), r.pkgs); err != nil {
		return err
	}
	for _, p := range r.pkgs {
		fmt.Fprintf(r.out, "vmtest: %s: %d kernel tests: %s\n", p.Rel, len(p.Tests), strings.Join(p.Tests, ", "))
		for _, s := range p.Skipped {
			fmt.Fprintf(r.out, "vmtest: %s: left to the host: %s\n", p.Rel, s)
		}
	}
	return nil
}

// bootAll prepares each kernel's image and initramfs and boots them,
// parallel at a time. A kernel that cannot be prepared fails the run after
// the others have booted.
func (r *vmRun) bootAll(ks []Kernel) ([]*result, error) {
	results := make([]*result, len(ks))
	sem := make(chan struct{}, max(r.parallel, 1))
	var wg sync.WaitGroup
	var prepErr error
	for i, k := range ks {
		kdir := filepath.Join(r.work, k.Name)
		ex, err := extract(r.debs[k.Name].deb, kdir)
		if err == nil {
			err = buildInitramfs(filepath.Join(kdir, "initrd.gz"), r.busybox, r.director, r.root, k, ex.Modules, r.pkgs)
		}
		if err != nil {
			prepErr = errors.Join(prepErr, fmt.Errorf("kernel %s: %w", k.Name, err))
			continue
		}
		// Only the image and the modules are needed of the unpacked package.
		if err := os.Rename(ex.Vmlinuz, filepath.Join(kdir, "vmlinuz")); err != nil {
			wg.Wait()
			return nil, err
		}
		os.RemoveAll(filepath.Join(kdir, "pkg"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = r.boot(k, kdir)
		}()
	}
	wg.Wait()
	return results, prepErr
}

func (r *vmRun) boot(k Kernel, kdir string) *result {
	pkg := r.debs[k.Name].pkg
	fmt.Fprintf(r.out, "vmtest: booting %s (%s)\n", k.Name, pkg)
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	cpus := r.cpus
	if k.CPUs > 0 {
		cpus = k.CPUs
	}
	net, err := newGuestNet(k.Name, cpus)
	if err != nil {
		return &result{Kernel: k, Package: pkg, Problems: []string{"the guest's NICs: " + err.Error()}}
	}
	defer net.close()
	args := append(qemuArgs(filepath.Join(kdir, "vmlinuz"), filepath.Join(kdir, "initrd.gz"), cpus, r.mem), net.qemuArgs()...)
	name, args := net.command(r.qemu, args)
	return boot(ctx, name, args, k, pkg, r.pkgs, filepath.Join(r.work, k.Name+".log"), r.out)
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run from inside the director module")
	}
	return filepath.Dir(mod), nil
}

// buildAll builds the director and each package's test binary without
// cgo (they load the C library only through purego: the guest gets it and
// libpcap, sharedLibs) and stripped (the initramfs is held in the guest's
// memory).
func buildAll(root, bin string, pkgs []pkgTests) (string, error) {
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	gobuild := func(args ...string) error {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	director := filepath.Join(bin, "director")
	if err := gobuild("build", "-ldflags=-s -w", "-o", director, "./cmd/director"); err != nil {
		return "", err
	}
	for i := range pkgs {
		pkgs[i].Binary = filepath.Join(bin, strings.ReplaceAll(pkgs[i].Rel, "/", "_")+".test")
		if err := gobuild("test", "-c", "-ldflags=-s -w", "-o", pkgs[i].Binary, "./"+pkgs[i].Rel); err != nil {
			return "", err
		}
	}
	return director, nil
}

// summary prints, per kernel, what ran, what failed and what the director
// reports of the kernel, and says whether any kernel failed.
func summary(out io.Writer, results []*result, pkgs []pkgTests, total time.Duration) (failed bool) {
	fmt.Fprintf(out, "\nvmtest: summary (%s in all)\n", total.Round(time.Second))
	for _, r := range results {
		if r == nil {
			continue
		}
		verdict := "PASS"
		if !r.ok() {
			verdict, failed = "FAIL", true
		}
		fmt.Fprintf(out, "%s  kernel %s: %s (%s), %s\n", verdict, r.Kernel.Name, r.Release, r.Package, r.Elapsed.Round(time.Second))
		if r.Package != r.Kernel.Package {
			fmt.Fprintf(out, "      %s is no longer served; %s stood in for it\n", r.Kernel.Package, r.Package)
		}
		for _, p := range pkgs {
			fmt.Fprintf(out, "      %-16s %d passed of %d kernel tests", p.Rel, len(r.Passed[p.Rel]), len(p.Tests))
			for _, what := range []struct {
				name string
				m    map[string][]string
			}{{"failed", r.Failed}, {"skipped", r.Skipped}, {"did not run", r.Missing}} {
				if n := what.m[p.Rel]; len(n) > 0 {
					fmt.Fprintf(out, "; %s: %s", what.name, strings.Join(n, ", "))
				}
			}
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "      %d subtests passed\n", r.Subtests)
		for _, f := range r.Failures {
			fmt.Fprintf(out, "      why: %s\n", f)
		}
		for _, pf := range r.PkgFailed {
			fmt.Fprintf(out, "      package failed: %s\n", pf)
		}
		for _, pr := range r.Problems {
			fmt.Fprintf(out, "      problem: %s\n", pr)
		}
		for _, l := range r.KernelLog {
			fmt.Fprintf(out, "      kernel said: %s\n", l)
		}
		fmt.Fprintf(out, "      %s\n", kernelReport(r.Status))
	}
	return failed
}

// kernelReport is the kernel section of the guest's 'director status
// --json': the release, and what the programs need that it lacks.
func kernelReport(status string) string {
	var doc struct {
		Kernel *struct {
			Release string   `json:"release"`
			Missing []string `json:"missing"`
			Build   string   `json:"build"`
			Lacking []string `json:"lacking"`
		} `json:"kernel"`
	}
	if err := json.Unmarshal([]byte(status), &doc); err != nil || doc.Kernel == nil {
		return "director status: no kernel report"
	}
	build := ""
	if doc.Kernel.Build != "" {
		build = ", " + doc.Kernel.Build + " build"
		if len(doc.Kernel.Lacking) > 0 {
			build += " (lacking " + strings.Join(doc.Kernel.Lacking, ", ") + ")"
		}
	}
	if len(doc.Kernel.Missing) == 0 {
		return fmt.Sprintf("director status: kernel %s has everything the programs use%s", doc.Kernel.Release, build)
	}
	sort.Strings(doc.Kernel.Missing)
	return fmt.Sprintf("director status: kernel %s lacks %s%s", doc.Kernel.Release, strings.Join(doc.Kernel.Missing, "; "), build)
}
