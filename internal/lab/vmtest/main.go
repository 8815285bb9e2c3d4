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

// tools checks that what the harness runs is here, for the archs of ks,
// saying which Debian package has what is missing.
func tools(ks []Kernel) error {
	need := map[string]string{"dpkg-deb": "dpkg", "apt-get": "apt", "xz": "xz-utils", "go": "Go"}
	for _, k := range ks {
		a := archOf(k)
		need[a.Qemu] = a.QemuPackage
	}
	for tool, pkg := range need {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: install %s", tool, pkg)
		}
	}
	return nil
}

// staticBusybox checks that the host's busybox, which the host arch's
// guests get, is static: they carry no libraries for it.
func staticBusybox(busybox string) error {
	f, err := elf.Open(busybox)
	if err != nil {
		return fmt.Errorf("%s: %w (install busybox-static)", busybox, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the guest needs a static one (install busybox-static)", busybox)
		}
	}
	return nil
}

func runAll(only, cache, work string, timeout time.Duration, parallel, cpus, mem int, out io.Writer) error {
	start := time.Now()
	ks, err := selectKernels(only)
	if err != nil {
		return err
	}
	r := &vmRun{cache: cache, work: work, timeout: timeout, parallel: parallel, cpus: cpus, mem: mem, out: out}
	if err := tools(ks); err != nil {
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
	if err := r.build(ks); err != nil {
		return err
	}
	results, err := r.bootAll(ks)
	if err != nil {
		return err
	}
	if summary(out, results, time.Since(start)) {
		return fmt.Errorf("a kernel failed; the guests' whole consoles are in %s", r.work)
	}
	if !keep {
		os.RemoveAll(r.work)
	}
	return nil
}

// vmRun is one make test-kernels: the packages fetched per kernel, and
// per arch the guests' files and the test binaries they run.
type vmRun struct {
	cache, work    string
	timeout        time.Duration
	parallel, cpus int
	mem            int
	out            io.Writer
	root           string
	debs           map[string]fetched
	builds         map[string]*archBuild // by arch name
}

// archBuild is what the guests of one arch run.
type archBuild struct {
	userland *userland
	pkgs     []pkgTests // the packages any of the arch's kernels runs tests of
	director string     // the director binary, without cgo
}

type fetched struct {
	deb, pkg string
}

func (r *vmRun) fetch(ks []Kernel) error {
	r.debs = map[string]fetched{}
	r.builds = map[string]*archBuild{}
	for _, k := range ks {
		deb, pkg, err := fetchKernel(r.cache, k, r.out)
		if err != nil {
			return err
		}
		r.debs[k.Name] = fetched{deb, pkg}
		a := archOf(k)
		if r.builds[a.Name] == nil {
			u, err := fetchUserland(r.cache, r.work, a, k.Suite, r.out)
			if err != nil {
				return fmt.Errorf("kernel %s: %w", k.Name, err)
			}
			if a.Name == hostArch {
				if err := staticBusybox(u.Busybox); err != nil {
					return err
				}
			}
			r.builds[a.Name] = &archBuild{userland: u}
		}
	}
	return nil
}

// build finds the kernel tests and builds, for each arch of ks, the
// director and the test binaries of the packages its kernels run.
func (r *vmRun) build(ks []Kernel) error {
	pkgs, err := discover(r.root)
	if err != nil {
		return err
	}
	for _, p := range pkgs {
		fmt.Fprintf(r.out, "vmtest: %s: %d kernel tests: %s\n", p.Rel, len(p.Tests), strings.Join(p.Tests, ", "))
		for _, s := range p.Skipped {
			fmt.Fprintf(r.out, "vmtest: %s: left to the host: %s\n", p.Rel, s)
		}
	}
	for _, name := range sortedKeys(r.builds) {
		b := r.builds[name]
		wanted := map[string]bool{}
		for _, k := range ks {
			if archOf(k).Name == name {
				for _, p := range k.testsOf(pkgs) {
					wanted[p.Rel] = true
				}
			}
		}
		for _, p := range pkgs {
			if wanted[p.Rel] {
				b.pkgs = append(b.pkgs, p)
			}
		}
		fmt.Fprintf(r.out, "vmtest: building the director and %d test binaries for %s (no cgo)\n", len(b.pkgs), name)
		if b.director, err = buildAll(r.root, filepath.Join(r.work, "bin-"+name), name, b.pkgs); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// bootAll prepares each kernel's image and initramfs and boots them,
// parallel at a time, in the order of ks as slots free: the longest
// first, so that one left waiting is a short one (kernels.go). A kernel
// that cannot be prepared fails the run after the others have booted.
func (r *vmRun) bootAll(ks []Kernel) ([]*result, error) {
	results := make([]*result, len(ks))
	sem := make(chan struct{}, max(r.parallel, 1))
	var wg sync.WaitGroup
	var prepErr error
	for i, k := range ks {
		kdir := filepath.Join(r.work, k.Name)
		b := r.builds[archOf(k).Name]
		pkgs := k.testsOf(b.pkgs)
		ex, err := extract(r.debs[k.Name].deb, kdir)
		if err == nil {
			err = buildInitramfs(filepath.Join(kdir, "initrd.gz"), b.userland, b.director, r.root, k, ex.Modules, pkgs)
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
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = r.boot(k, kdir, pkgs)
		}()
	}
	wg.Wait()
	return results, prepErr
}

func (r *vmRun) boot(k Kernel, kdir string, pkgs []pkgTests) *result {
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
		return &result{Kernel: k, Package: pkg, Pkgs: pkgs, Problems: []string{"the guest's NICs: " + err.Error()}}
	}
	defer net.close()
	a := archOf(k)
	args := append(qemuArgs(a, filepath.Join(kdir, "vmlinuz"), filepath.Join(kdir, "initrd.gz"), cpus, r.mem), net.qemuArgs()...)
	qemu, err := exec.LookPath(a.Qemu)
	if err != nil {
		return &result{Kernel: k, Package: pkg, Pkgs: pkgs, Problems: []string{err.Error()}}
	}
	name, args := net.command(qemu, args)
	return boot(ctx, name, args, k, pkg, pkgs, filepath.Join(r.work, k.Name+".log"), r.out)
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

// buildAll builds the director and each package's test binary for goarch
// without cgo (they load the C library only through purego: the guest gets
// it and libpcap, sharedLibs) and stripped (the initramfs is held in the
// guest's memory). It sets each of pkgs' Binary.
func buildAll(root, bin, goarch string, pkgs []pkgTests) (string, error) {
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	gobuild := func(args ...string) error {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+goarch)
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
func summary(out io.Writer, results []*result, total time.Duration) (failed bool) {
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
		for _, p := range r.Pkgs {
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
