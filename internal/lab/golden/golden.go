// Package golden compares what a test produces with a golden file under
// the module's testdata/golden, and with -update rewrites the file: the
// one place the tests' golden files are read and written.
package golden

import (
	"bufio"
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden (check the difference first)")

// Dir is the module's testdata/golden: the first found going up from the
// test's working directory (its package's), so that a test binary run
// elsewhere with testdata beside it finds it too.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		g := filepath.Join(dir, "testdata", "golden")
		if fi, err := os.Stat(g); err == nil && fi.IsDir() {
			return g
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no testdata/golden above the test's directory")
		}
		dir = up
	}
}

// Check compares got with the golden file name, or writes got there with
// -update. A difference fails t, naming the file, the first line that
// differs, and how to update it.
func Check(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join(Dir(t), name)
	want := golden(t, path, got)
	if bytes.Equal(want, got) {
		return
	}
	wl, gl := bufio.NewScanner(bytes.NewReader(want)), bufio.NewScanner(bytes.NewReader(got))
	line := 0
	for {
		line++
		w, g := wl.Scan(), gl.Scan()
		if !w || !g || wl.Text() != gl.Text() {
			t.Errorf("%s differs at line %d (run the test with -update after checking the difference):\n want %q\n got  %q\nwhole output:\n%s",
				path, line, text(wl, w), text(gl, g), got)
			return
		}
	}
}

// CheckBinary is Check for a file that is not text (a picture), at path
// relative to the module's root (testdata/golden's parent's parent):
// compared byte for byte, rewritten with -update.
func CheckBinary(t testing.TB, path string, got []byte) {
	t.Helper()
	path = filepath.Join(filepath.Dir(filepath.Dir(Dir(t))), path)
	if want := golden(t, path, got); !bytes.Equal(want, got) {
		t.Errorf("%s is not what the command makes now (%d bytes, was %d): run the test with -update after looking at both", path, len(got), len(want))
	}
}

// golden is the file at path, written with got first under -update.
func golden(t testing.TB, path string, got []byte) []byte {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("writing %s: %v", path, err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	return want
}

func text(s *bufio.Scanner, ok bool) string {
	if !ok {
		return "(end)"
	}
	return s.Text()
}
