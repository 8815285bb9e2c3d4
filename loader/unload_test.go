package loader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

// TestUnloadRefusesWhatIsNotPins gives Unload directories that a mistyped
// --bpffs names: one not on a bpffs, full of files that share the pins'
// names, must be refused with nothing in it removed.
func TestUnloadRefusesWhatIsNotPins(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{pinProgram, "table_a", "data.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	err := Unload(dir)
	if err == nil || !strings.Contains(err.Error(), "is not on a bpf filesystem") || !strings.Contains(err.Error(), "nothing removed") {
		t.Fatalf("Unload of a plain directory: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Fatalf("Unload removed files of a plain directory: %d left", len(entries))
	}
	file := filepath.Join(dir, "data.txt")
	if err := Unload(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Unload of a file: %v", err)
	}
}

// TestUnloadRemovesOnlyItsOwnPins loads a director, puts beside its pins
// what another program pinned, and unloads: refused, with the director
// still loaded and attached, until only the director's pins are left.
func TestUnloadRemovesOnlyItsOwnPins(t *testing.T) {
	dir := testDir(t)
	err := testrun.InNetns(func() error {
		if err := testrun.Veth("up0", "up1"); err != nil {
			return err
		}
		d, err := Load(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		if _, err := d.Attach("up0", ModeGeneric); err != nil {
			return err
		}
		foreign, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			return err
		}
		defer foreign.Close()
		if err := foreign.Pin(filepath.Join(dir, "someone_elses")); err != nil {
			return err
		}
		if err := os.Mkdir(filepath.Join(dir, "tc"), 0o700); err != nil {
			return err
		}
		err = Unload(dir)
		if err == nil || !strings.Contains(err.Error(), "someone_elses, tc/") || !strings.Contains(err.Error(), "nothing removed") {
			t.Errorf("Unload beside foreign pins: %v", err)
		}
		if a, err := d.Attachments(); err != nil || len(a) != 1 {
			t.Errorf("after a refused unload: attachments %v, %v", a, err)
		}
		if _, err := Open(dir); err != nil {
			t.Errorf("after a refused unload the director no longer opens: %v", err)
		}
		os.Remove(filepath.Join(dir, "tc"))
		os.Remove(filepath.Join(dir, "someone_elses"))
		if err := Unload(dir); err != nil {
			return err
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("unload left %s: %v", dir, err)
		}
		return Unload(dir) // idempotent
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUnloadRefusesAnEmptyBPFFSDirectory: a directory on a bpffs that holds
// nothing of director's (the bpffs root, another tool's) is not removed.
func TestUnloadRefusesAnEmptyBPFFSDirectory(t *testing.T) {
	testenv.Kernel(t)
	dir := testenv.PinDir("director-empty")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := Unload(dir); err == nil || !strings.Contains(err.Error(), "holds no director pins") {
		t.Fatalf("Unload of an empty bpffs directory: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the empty directory went: %v", err)
	}
}
