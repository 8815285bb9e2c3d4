//go:build !nolibpcap

package pcapfilter

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStaticBuildIsStatic: 'make build STATIC=1' (-tags nolibpcap, no
// cgo) gives a director with no interpreter and no library to load, for
// the host's arch and arm64 alike; the dynamic build names one.
func TestStaticBuildIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the director three times")
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	for _, c := range []struct {
		goarch string
		tags   []string
		static bool
	}{
		{"amd64", []string{"-tags", "nolibpcap"}, true},
		{"arm64", []string{"-tags", "nolibpcap"}, true},
		{"arm64", nil, false},
	} {
		bin := filepath.Join(t.TempDir(), "director")
		cmd := exec.Command("go", append(append([]string{"build"}, c.tags...), "-o", bin, "./cmd/director")...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+c.goarch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("GOARCH=%s go build %v: %v\n%s", c.goarch, c.tags, err, out)
		}
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		libs, _ := f.ImportedLibraries()
		interp := false
		for _, p := range f.Progs {
			interp = interp || p.Type == elf.PT_INTERP
		}
		f.Close()
		if static := !interp && len(libs) == 0; static != c.static {
			t.Errorf("GOARCH=%s %v: static %v (interpreter %v, libraries %v), want %v", c.goarch, c.tags, static, interp, libs, c.static)
		}
	}
}
