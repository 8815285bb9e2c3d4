package main

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// An arch is a machine the guests may be: the host's (amd64), whose
// busybox and C library the guests are given, or another (arm64), whose
// user-space packages are fetched from Debian like its kernels and whose
// CPU qemu emulates whole.
type arch struct {
	// Name is GOARCH and Debian's architecture: amd64, arm64.
	Name string
	// Qemu is the emulator, QemuPackage the Debian package that has it.
	Qemu, QemuPackage string
	// Machine is qemu's machine and CPU options.
	Machine []string
	// Console is the kernel's serial console.
	Console string
	// Triplet is the multiarch directory of its libraries.
	Triplet string
	// Userland are the Debian packages the guest's files come from when
	// the arch is not the host's: busybox, the C library, and libpcap with
	// the libraries it needs (those a package's own DT_NEEDED names; a
	// missing one is an error naming it). Empty for the host's arch: its
	// files are the host's.
	Userland []string
}

// hostArch is the arch whose files the guests share with the host.
const hostArch = "amd64"

var arches = map[string]arch{
	"amd64": {Name: "amd64", Qemu: "qemu-system-x86_64", QemuPackage: "qemu-system-x86",
		Machine: []string{"-cpu", "max"}, Console: "ttyS0", Triplet: "x86_64-linux-gnu"},
	// virt with GICv3, whose ITS gives the NICs' queues their MSI-X
	// vectors. pauth-impdef: plain max emulates pointer authentication's
	// real algorithm (QARMA), about three times slower under TCG.
	"arm64": {Name: "arm64", Qemu: "qemu-system-aarch64", QemuPackage: "qemu-system-arm",
		Machine: []string{"-M", "virt,gic-version=3", "-cpu", "max,pauth-impdef=on"}, Console: "ttyAMA0", Triplet: "aarch64-linux-gnu",
		Userland: []string{"busybox-static", "libc6", "libpcap0.8", "libdbus-1-3", "libsystemd0", "libcap2",
			"libgcrypt20", "liblzma5", "libzstd1", "liblz4-1", "libgpg-error0"}},
}

// archOf is k's arch.
func archOf(k Kernel) arch {
	if k.Arch == "" {
		return arches[hostArch]
	}
	return arches[k.Arch]
}

// userland is the guest's user-space files of one arch: a root directory
// holding busybox and the shared libraries. The host's arch has "/".
type userland struct {
	Root    string
	Busybox string // on the host
	arch    arch
}

// fetchUserland downloads a's Userland packages into the cache (under
// a.Name/) and unpacks them into dir. For the host's arch it is the host.
func fetchUserland(cache, dir string, a arch, suite string, log io.Writer) (*userland, error) {
	if len(a.Userland) == 0 {
		return &userland{Root: "/", Busybox: "/bin/busybox", arch: a}, nil
	}
	adir := filepath.Join(cache, a.Name)
	if err := os.MkdirAll(adir, 0o755); err != nil {
		return nil, err
	}
	apt, err := aptConfig(cache, suite, a.Name)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "userland-"+a.Name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	for _, pkg := range a.Userland {
		deb := filepath.Join(adir, pkg+".deb")
		if _, err := os.Stat(deb); err != nil {
			if err := downloadOrUpdate(adir, pkg, apt, log); err != nil {
				return nil, err
			}
		}
		if _, err := run("dpkg-deb", "-x", deb, root); err != nil {
			return nil, err
		}
	}
	u := &userland{Root: root, Busybox: filepath.Join(root, "bin", "busybox"), arch: a}
	if _, err := os.Stat(u.Busybox); err != nil {
		return nil, fmt.Errorf("%s userland: no busybox: %w", a.Name, err)
	}
	return u, nil
}

// inRoot is where guest path p is found under root, following symbolic
// links as the guest would (an absolute target is the root's own).
func inRoot(root, p string) (string, error) {
	for range 16 {
		host := filepath.Join(root, p)
		fi, err := os.Lstat(host)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return host, nil
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	return "", fmt.Errorf("%s: too many symbolic links", p)
}

// sharedLibs are the files, as guest path and host source, the guest's
// dynamic loader needs to run bins (which load the C library through
// purego, for libpcap: they are built without cgo but link it
// dynamically): the interpreter, what each binary's DT_NEEDED names, and
// libpcap, which capture's filter expressions load at run time, with what
// it needs in turn.
func (u *userland) sharedLibs(bins []string) (map[string]string, error) {
	dirs := []string{"/lib/" + u.arch.Triplet, "/usr/lib/" + u.arch.Triplet, "/lib", "/usr/lib"}
	libs := map[string]string{}
	var queue []string
	add := func(guest string) error {
		if _, ok := libs[guest]; ok {
			return nil
		}
		src, err := inRoot(u.Root, guest)
		if err != nil {
			return err
		}
		libs[guest] = src
		queue = append(queue, src)
		return nil
	}
	find := func(name string) error {
		for _, d := range dirs {
			if _, err := inRoot(u.Root, d+"/"+name); err == nil {
				return add(d + "/" + name)
			}
		}
		return fmt.Errorf("%s (%s) is in none of %s under %s: add its package to the arch's Userland", name, u.arch.Name, strings.Join(dirs, ", "), u.Root)
	}
	if err := find("libpcap.so.0.8"); err != nil {
		return nil, err
	}
	queue = append(queue, bins...)
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		needed, interp, err := elfNeeds(file)
		if err != nil {
			return nil, err
		}
		if interp != "" {
			if err := add(interp); err != nil {
				return nil, fmt.Errorf("%s: its interpreter: %w", file, err)
			}
		}
		for _, n := range needed {
			if err := find(n); err != nil {
				return nil, fmt.Errorf("%s needs %w", filepath.Base(file), err)
			}
		}
	}
	return libs, nil
}

// elfNeeds are the libraries an ELF file names (DT_NEEDED) and its
// interpreter: none for a static one.
func elfNeeds(file string) (needed []string, interp string, err error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, "", fmt.Errorf("%s: interpreter: %w", file, err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	needed, err = f.ImportedLibraries()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	return needed, interp, nil
}
