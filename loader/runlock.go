package loader

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pinRunLock is the directory, inside the pin directory, whose flock is
// the run lock: one 'director run' per set of pins. It is the pins' own
// inode, so the lock is the same whatever path, bind mount or mount
// namespace reaches them, and two pin directories never share it. (The pin
// directory's own flock is the apply lock, which the service takes too.)
const pinRunLock = "run_lock"

// ErrRunning is what errors.Is finds in a RunningError.
var ErrRunning = errors.New("a service serves these pins")

// RunningError says that a service ('director run', or 'director backend
// run' for a backend program's pins) holds a pin directory's run lock,
// and which.
type RunningError struct {
	Dir string
	PID int // 0 when it could not be found
	// What was refused ("detach"), or "" when another service was.
	What string
	// Backend is set when the holder is 'director backend run': the pins
	// are the backend program's.
	Backend bool
}

func (e *RunningError) service() string {
	if e.Backend {
		return "'director backend run'"
	}
	return "'director run'"
}

func (e *RunningError) Error() string {
	who := e.service()
	if e.PID != 0 {
		who = fmt.Sprintf("%s (pid %d)", who, e.PID)
	}
	if e.What == "" {
		return fmt.Sprintf("another %s already serves the pins in %s; one service per pin directory", who, e.Dir)
	}
	if e.Backend {
		return fmt.Sprintf("%s refused: %s serves the pins in %s, and would undo it or be undone: stop it first "+
			"(systemctl stop director-backend)", e.What, who, e.Dir)
	}
	return fmt.Sprintf("%s refused: %s serves the pins in %s, and would undo it or be undone: edit its config files "+
		"instead (it applies safe changes and holds unsafe ones for 'director apply --allow-unsafe'), or stop it first "+
		"(systemctl stop director)", e.What, who, e.Dir)
}

func (e *RunningError) Is(target error) bool { return target == ErrRunning }

// LockRun takes dir's run lock for this process, making dir if need be,
// or says which process holds it. The kernel drops the lock when the
// process dies, so a crash never leaves it stuck.
func LockRun(dir string) (unlock func(), err error) {
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, pinRunLock)
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("run lock: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("run lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid, _ := RunHolder(dir)
			return nil, &RunningError{Dir: dir, PID: pid, Backend: PinnedKind(dir) == KindBackend}
		}
		return nil, fmt.Errorf("run lock %s: %w", path, err)
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// RunHolder is the pid of the process holding dir's run lock, as this
// process's pid namespace numbers it: 0 when none does. It only reads
// /proc/locks, so asking never gets in the way of a service starting.
func RunHolder(dir string) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, pinRunLock), &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, nil
		}
		return 0, fmt.Errorf("run lock: %w", err)
	}
	return flockHolder(st.Dev, st.Ino)
}

// CheckNoRun refuses, naming the pid, when a service ('director run' or
// 'director backend run') other than this process serves dir: every
// command that changes pins (load, apply, attach, detach, unload, and the
// backend's) must go through the service then, or the service would undo
// it or be undone.
func CheckNoRun(dir, what string) error {
	pid, err := RunHolder(dir)
	if errors.Is(err, os.ErrPermission) {
		// One who may not look at the pins may not change them either:
		// the command's own attempt says what it lacks.
		return nil
	}
	if err != nil || pid == 0 || pid == os.Getpid() {
		return err
	}
	return &RunningError{Dir: dir, PID: pid, What: what, Backend: PinnedKind(dir) == KindBackend}
}

// flockHolder finds in /proc/locks the process holding an exclusive flock
// on the inode dev:ino: lines like "1: FLOCK  ADVISORY  WRITE 1234
// 00:1a:5678 0 EOF".
func flockHolder(dev, ino uint64) (int, error) {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		// A blocked waiter's line has "->" after the number.
		if len(fl) < 6 || fl[1] != "FLOCK" || fl[3] != "WRITE" || fl[5] != want {
			continue
		}
		pid, err := strconv.Atoi(fl[4])
		if err != nil {
			continue
		}
		return pid, nil
	}
	return 0, sc.Err()
}
