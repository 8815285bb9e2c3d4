//go:build !nolibpcap

package pcapfilter

import (
	"debug/elf"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestStaticBuildIsStatic: README's builds, run as it prints them (BIN
// aside): 'make build STATIC=1' (-tags nolibpcap, no cgo) gives a
// director with no interpreter and no library to load, for the host's
// arch and, with GOARCH=arm64, for arm64; 'make build GOARCH=arm64' gives
// one that names arm64's dynamic loader.
func TestStaticBuildIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the director three times")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make: %v (README's builds are make's)", err)
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	for _, c := range []struct {
		vars    []string
		machine elf.Machine
		interp  string // "" for a static binary
	}{
		{[]string{"STATIC=1"}, elf.EM_X86_64, ""},
		{[]string{"STATIC=1", "GOARCH=arm64"}, elf.EM_AARCH64, ""},
		{[]string{"GOARCH=arm64"}, elf.EM_AARCH64, "/lib/ld-linux-aarch64.so.1"},
	} {
		if runtime.GOARCH != "amd64" && c.machine == elf.EM_X86_64 {
			continue
		}
		bin := filepath.Join(t.TempDir(), "director")
		args := append([]string{"-s", "build", "BIN=" + bin}, c.vars...)
		cmd := exec.Command("make", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make %v: %v\n%s", args, err, out)
		}
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		interp, libs := "", []string(nil)
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b, _ := io.ReadAll(p.Open())
				interp = strings.TrimRight(string(b), "\x00")
			}
		}
		libs, _ = f.ImportedLibraries()
		machine := f.Machine
		f.Close()
		if machine != c.machine || interp != c.interp || (c.interp == "" && len(libs) > 0) {
			t.Errorf("make build %v: %v, interpreter %q, libraries %v; want %v, interpreter %q", c.vars, machine, interp, libs, c.machine, c.interp)
		}
	}
}
