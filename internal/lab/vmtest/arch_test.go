package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestKernelOnly: a guest with Only runs a whole package or the tests of
// a prefix, and nothing else; one without runs everything.
func TestKernelOnly(t *testing.T) {
	pkgs := []pkgTests{
		{Rel: "loader", Tests: []string{"TestA", "TestB"}},
		{Rel: "internal/lab/testbed", Tests: []string{"TestDrain", "TestNICNative", "TestNICQueues"}},
		{Rel: "internal/service", Tests: []string{"TestRun"}},
		{Rel: "loaderx", Tests: []string{"TestC"}},
	}
	all := Kernel{Name: "all"}
	if got := all.testsOf(pkgs); !reflect.DeepEqual(got, pkgs) {
		t.Errorf("no Only: %v, want every package", got)
	}
	k := Kernel{Name: "some", Only: []string{"loader", "internal/lab/testbed.TestNIC"}}
	got := k.testsOf(pkgs)
	want := []pkgTests{
		{Rel: "loader", Tests: []string{"TestA", "TestB"}},
		{Rel: "internal/lab/testbed", Tests: []string{"TestNICNative", "TestNICQueues"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Only %v: %v, want %v", k.Only, got, want)
	}
	if pkgs[1].Tests[0] != "TestDrain" {
		t.Errorf("testsOf changed its argument: %v", pkgs[1].Tests)
	}
}

// TestEveryKernelHasItsArch: each kernel names an arch the harness knows,
// and each foreign one a suite to fetch its packages from.
func TestEveryKernelHasItsArch(t *testing.T) {
	for _, k := range kernels {
		a, ok := arches[archOf(k).Name]
		if !ok || (k.Arch != "" && k.Arch != a.Name) {
			t.Errorf("kernel %s: arch %q is none of the harness's", k.Name, k.Arch)
			continue
		}
		if a.Name != hostArch && (k.Suite == "" || len(a.Userland) == 0) {
			t.Errorf("kernel %s: arch %s needs a Suite and Userland packages", k.Name, a.Name)
		}
		if !strings.HasSuffix(k.Package, "-"+a.Name) {
			t.Errorf("kernel %s: package %s is not of arch %s", k.Name, k.Package, a.Name)
		}
	}
}

// TestSharedLibsFromARoot: the libraries are found under the userland's
// root, through its symbolic links (absolute ones the root's own), with
// the interpreter and what each library needs in turn; one missing is
// an error naming it.
func TestSharedLibsFromARoot(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the host's ELF files")
	}
	host := &userland{Root: "/", Busybox: "/bin/busybox", arch: arches[hostArch]}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	needed, _, err := elfNeeds(self)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.sharedLibs(nil); err != nil {
		t.Skipf("the host has no libpcap to test with: %v", err)
	}
	// A root of its own: the host's libraries copied in under the triplet,
	// the interpreter a link to them, one library behind an absolute link.
	root := t.TempDir()
	tri := arches[hostArch].Triplet
	libdir := filepath.Join(root, "lib", tri)
	if err := os.MkdirAll(libdir, 0o755); err != nil {
		t.Fatal(err)
	}
	hostLibs, err := host.sharedLibs([]string{self})
	if err != nil {
		t.Fatal(err)
	}
	// The C library names the interpreter (a static test binary does not).
	_, interp, err := elfNeeds(hostLibs["/lib/"+tri+"/libc.so.6"])
	if err != nil {
		t.Fatal(err)
	}
	for guest, src := range hostLibs {
		dst := filepath.Join(libdir, filepath.Base(guest))
		if out, err := exec.Command("cp", "-L", src, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
	}
	if interp != "" {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(interp)), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(root, interp))
		if err := os.Symlink("/lib/"+tri+"/"+filepath.Base(interp), filepath.Join(root, interp)); err != nil {
			t.Fatal(err)
		}
	}
	u := &userland{Root: root, arch: arches[hostArch]}
	libs, err := u.sharedLibs([]string{self})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(needed, "libpcap.so.0.8") {
		src, ok := libs["/lib/"+tri+"/"+n]
		if !ok || !strings.HasPrefix(src, root) {
			t.Errorf("%s: %q, want a file under %s (all: %v)", n, src, root, libs)
		}
	}
	if interp != "" {
		if src := libs[interp]; src != filepath.Join(libdir, filepath.Base(interp)) {
			t.Errorf("interpreter %s: from %q, want the link's target under the root", interp, src)
		}
	}
	os.Remove(filepath.Join(libdir, "libc.so.6"))
	if _, err := u.sharedLibs([]string{self}); err == nil || !strings.Contains(err.Error(), "libc.so.6") {
		t.Errorf("without libc: %v, want an error naming it", err)
	}
}
