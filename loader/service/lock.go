package service

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultLockDir holds the lock files that keep one 'director run' per pin
// directory (bpffs holds no regular files, and a lock on the pin
// directory itself is the apply lock).
const DefaultLockDir = "/run/director"

// lockRun takes bpffs's run lock, or says which process holds it. The
// kernel drops the lock when the process dies, so a crash never leaves it
// stuck.
// runFile is the path of a file of bpffs's run in lockDir.
func runFile(lockDir, bpffs, ext string) string {
	if abs, err := filepath.Abs(bpffs); err == nil {
		bpffs = abs
	}
	return filepath.Join(lockDir, "run"+strings.ReplaceAll(filepath.Clean(bpffs), "/", "-")+ext)
}

func lockRun(lockDir, bpffs string) (unlock func(), err error) {
	abs, err := filepath.Abs(bpffs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, fmt.Errorf("run lock: %w%s", err, needsRoot(err))
	}
	path := runFile(lockDir, abs, ".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("run lock: %w%s", err, needsRoot(err))
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil && len(b) > 0 {
			holder = " (pid " + strings.TrimSpace(string(b)) + ")"
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another 'director run'%s already serves %s (lock %s); one service per pin directory", holder, abs, path)
		}
		return nil, fmt.Errorf("run lock %s: %w", path, err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		f.Truncate(0)
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

func needsRoot(err error) string {
	if errors.Is(err, fs.ErrPermission) {
		return " (director run runs as root, or with the capabilities README.md lists)"
	}
	return ""
}
