package main

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// fetchKernel returns the path of k's package in the cache, downloading it
// with apt-get first if it is not there, and the package's name: k.Package,
// or, where Debian no longer serves that, the newest of k.Series.
func fetchKernel(cache string, k Kernel, log io.Writer) (deb, pkg string, err error) {
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", "", err
	}
	pkg = k.Package
	deb = filepath.Join(cache, pkg+".deb")
	if _, err := os.Stat(deb); err == nil {
		return deb, pkg, nil
	}
	apt, err := aptConfig(cache, k.Suite, archOf(k).Name)
	if err != nil {
		return "", "", err
	}
	err = downloadOrUpdate(cache, pkg, apt, log)
	if err != nil {
		alt, aerr := newestOfSeries(k.Series, archOf(k).Name, apt)
		if aerr != nil {
			return "", "", fmt.Errorf("kernel %s: %s cannot be downloaded (%v), and no other package of the series is served: %w", k.Name, pkg, err, aerr)
		}
		fmt.Fprintf(log, "vmtest: kernel %s: %s is no longer served; booting %s, the newest of the series (update kernels.go)\n", k.Name, pkg, alt)
		pkg = alt
		deb = filepath.Join(cache, pkg+".deb")
		if _, err := os.Stat(deb); err == nil {
			return deb, pkg, nil
		}
		if err := download(cache, pkg, apt, log); err != nil {
			return "", "", err
		}
	}
	return deb, pkg, nil
}

// downloadOrUpdate downloads pkg into cache, updating apt's package lists
// first if the download fails: a fresh machine's may be missing or stale.
func downloadOrUpdate(cache, pkg string, apt []string, log io.Writer) error {
	err := download(cache, pkg, apt, log)
	if err == nil {
		return nil
	}
	fmt.Fprintf(log, "vmtest: apt-get download %s failed (%v); updating the package lists\n", pkg, err)
	if out, uerr := exec.Command("apt-get", append(apt, "update", "-q")...).CombinedOutput(); uerr != nil {
		return fmt.Errorf("apt-get update: %w\n%s", uerr, out)
	}
	return download(cache, pkg, apt, log)
}

// aptConfig is the apt-get options that fetch suite's packages of arch:
// none for the machine's own sources and arch (suite "", the host's
// arch), else a sources list and package lists of the cache's own, for
// Debian's suite and its security updates, and that arch
// alone, leaving the machine's configuration and architectures alone.
func aptConfig(cache, suite, archName string) ([]string, error) {
	if suite == "" && archName == hostArch {
		return nil, nil
	}
	if suite == "" {
		return nil, fmt.Errorf("a kernel of arch %s needs a Suite to fetch its packages from", archName)
	}
	name := "apt-" + suite
	if archName != hostArch {
		name += "-" + archName
	}
	dir := filepath.Join(cache, name)
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	const keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
	list := fmt.Sprintf("deb [signed-by=%[1]s] http://deb.debian.org/debian %[2]s main\n"+
		"deb [signed-by=%[1]s] http://deb.debian.org/debian-security %[2]s-security main\n", keyring, suite)
	if err := os.WriteFile(filepath.Join(dir, "sources.list"), []byte(list), 0o644); err != nil {
		return nil, err
	}
	opts := []string{"-o", "Dir::Etc::sourcelist=" + filepath.Join(dir, "sources.list"), "-o", "Dir::Etc::sourceparts=-",
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"), "-o", "Dir::Cache=" + filepath.Join(dir, "cache")}
	if archName != hostArch {
		// The packages of that arch alone, and not the machine's installed
		// ones (its dpkg status) standing in for them.
		opts = append(opts, "-o", "APT::Architecture="+archName, "-o", "APT::Architectures="+archName,
			"-o", "Dir::State::status=/dev/null")
	}
	return opts, nil
}

// download fetches pkg's .deb into cache as pkg.deb, through a temporary
// directory, so that an interrupted download leaves nothing behind.
func download(cache, pkg string, apt []string, log io.Writer) error {
	tmp, err := os.MkdirTemp(cache, "download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// apt-get runs the download as _apt where it can; the directory must
	// let it write.
	os.Chmod(tmp, 0o777)
	fmt.Fprintf(log, "vmtest: downloading %s\n", pkg)
	cmd := exec.Command("apt-get", append(apt, "download", "-q", pkg)...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %w\n%s", pkg, err, bytes.TrimSpace(out))
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s: %d packages arrived, want 1", pkg, len(debs))
	}
	return os.Rename(debs[0], filepath.Join(cache, pkg+".deb"))
}

// newestOfSeries is the served package whose name starts with series and
// has the highest number after it (6.1.0-57 over 6.1.0-9).
func newestOfSeries(series, archName string, apt []string) (string, error) {
	out, err := exec.Command("apt-cache", append(apt, "search", "--names-only", "^"+strings.ReplaceAll(series, ".", `\.`)+".*-cloud-"+archName+"$")...).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache search: %w", err)
	}
	best, bestN := "", -1
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(name, series) {
			continue
		}
		rest := name[len(series):]
		end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		if end <= 0 {
			continue
		}
		if n, err := strconv.Atoi(rest[:end]); err == nil && n > bestN {
			best, bestN = name, n
		}
	}
	if best == "" {
		return "", errors.New("none found")
	}
	return best, nil
}

// extracted is what the guest needs of a kernel package.
type extracted struct {
	Vmlinuz string
	// Modules are the decompressed modules to load, each after the
	// modules it depends on.
	Modules []string
}

// extract unpacks deb into dir and picks out the kernel image and the
// modules of modulesWanted, with their dependencies, decompressed.
func extract(deb, dir string) (*extracted, error) {
	root := filepath.Join(dir, "pkg")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command("dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg-deb -x %s: %w\n%s", deb, err, out)
	}
	images, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(images) != 1 {
		return nil, fmt.Errorf("%s: %d kernel images in boot/, want 1", deb, len(images))
	}
	// Module files by name; the kernel spells names with '_' where files
	// may have '-'.
	files := map[string]string{}
	for _, base := range []string{"lib/modules", "usr/lib/modules"} {
		filepath.WalkDir(filepath.Join(root, base), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if name, ok := moduleName(d.Name()); ok {
					files[name] = p
				}
			}
			return nil
		})
	}
	ex := &extracted{Vmlinuz: images[0]}
	// Modules built into this kernel (modules.builtin: one path a line),
	// which a wanted one may be here and a module there (virtio_pci is
	// built into 6.12's cloud kernel, a module of 5.10's and 6.1's).
	builtin := map[string]bool{}
	lists, _ := filepath.Glob(filepath.Join(root, "*", "modules", "*", "modules.builtin"))
	more, _ := filepath.Glob(filepath.Join(root, "usr", "lib", "modules", "*", "modules.builtin"))
	for _, l := range append(lists, more...) {
		data, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(data), "\n") {
			if name, ok := moduleName(filepath.Base(line)); ok {
				builtin[name] = true
			}
		}
	}
	seen := map[string]bool{}
	var add func(name string, chain []string) error
	add = func(name string, chain []string) error {
		name = strings.ReplaceAll(name, "-", "_")
		if seen[name] {
			return nil
		}
		seen[name] = true
		src, ok := files[name]
		if !ok && builtin[name] {
			return nil
		}
		if !ok {
			return fmt.Errorf("%s: no module %s (wanted by %s)", deb, name, strings.Join(chain, " <- "))
		}
		data, err := decompress(src)
		if err != nil {
			return err
		}
		deps, err := moduleDepends(data)
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		for _, d := range deps {
			if err := add(d, append(chain, name)); err != nil {
				return err
			}
		}
		out := filepath.Join(dir, "modules", name+".ko")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			return err
		}
		ex.Modules = append(ex.Modules, out)
		return nil
	}
	wanted := append([]string(nil), modulesWanted...)
	sort.Strings(wanted)
	for _, m := range wanted {
		if err := add(m, []string{"vmtest"}); err != nil {
			return nil, err
		}
	}
	return ex, nil
}

// moduleName is the kernel's name of a module file (veth.ko.xz: veth).
func moduleName(file string) (string, bool) {
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		if strings.HasSuffix(file, ext) {
			return strings.ReplaceAll(strings.TrimSuffix(file, ext), "-", "_"), true
		}
	}
	return "", false
}

// decompress reads a module file, decompressing it as its name says:
// busybox's insmod takes only plain modules.
func decompress(path string) ([]byte, error) {
	switch {
	case strings.HasSuffix(path, ".xz"):
		return run("xz", "-dc", path)
	case strings.HasSuffix(path, ".zst"):
		return run("zstd", "-dc", path)
	case strings.HasSuffix(path, ".gz"):
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return io.ReadAll(z)
	}
	return os.ReadFile(path)
}

func run(name string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// moduleDepends reads the modules a module depends on from its .modinfo
// section ("depends=llc,stp"), as modinfo does: the packages carry no
// modules.dep, which depmod writes at install.
func moduleDepends(ko []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil {
		return nil, fmt.Errorf("reading the module: %w", err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, errors.New("no .modinfo section")
	}
	info, err := sec.Data()
	if err != nil {
		return nil, err
	}
	return parseDepends(info), nil
}

// parseDepends picks the depends= entry out of a .modinfo section: NUL-
// separated key=value strings.
func parseDepends(info []byte) []string {
	for _, kv := range bytes.Split(info, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					deps = append(deps, d)
				}
			}
			return deps
		}
	}
	return nil
}
