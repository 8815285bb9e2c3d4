package loader

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRunLockIsThePins: the run lock belongs to the pins, not the path to
// them: a bind mount of the same pins is refused, naming this process; pin
// directories whose paths would once have mapped to the same lock file
// ("a/b" and "a-b") are each their own; RunHolder finds the holder; and
// the lock goes with its unlock.
func TestRunLockIsThePins(t *testing.T) {
	base := testDir(t)
	a := filepath.Join(base, "a", "b")
	b := base + "-a-b"
	t.Cleanup(func() {
		Unload(b)
		Unload(a) // inside base, which Unload refuses while it holds a/
		os.Remove(filepath.Dir(a))
		os.Remove(base) // which held only a/: no pins of its own
	})
	if err := os.MkdirAll(filepath.Dir(a), 0o700); err != nil {
		t.Fatal(err)
	}
	unlockA, err := LockRun(a)
	if err != nil {
		t.Fatal(err)
	}
	unlockB, err := LockRun(b)
	if err != nil {
		t.Fatalf("a/b's lock keeps a-b's from being taken: %v", err)
	}
	unlockB()
	if pid, err := RunHolder(a); err != nil || pid != os.Getpid() {
		t.Fatalf("holder of a/b: %d %v", pid, err)
	}
	alias := base + "-alias"
	if err := os.Mkdir(alias, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(alias)
	if err := unix.Mount(a, alias, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(alias, unix.MNT_DETACH)
	_, err = LockRun(alias)
	var re *RunningError
	if !errors.As(err, &re) || !errors.Is(err, ErrRunning) || re.PID != os.Getpid() || !strings.Contains(err.Error(), "already serves") {
		t.Fatalf("a bind mount of locked pins: %v", err)
	}
	unlockA()
	if pid, err := RunHolder(alias); err != nil || pid != 0 {
		t.Fatalf("holder after unlock: %d %v", pid, err)
	}
	unlockAlias, err := LockRun(alias)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	unlockAlias()
}
