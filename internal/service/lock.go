package service

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultLockDir holds what a running service publishes for 'director
// status' (bpffs holds no regular files). The one-run lock itself is the
// pins' own (loader.LockRun).
const DefaultLockDir = "/run/director"

// runFile is the path of a file of bpffs's service in lockDir, named by
// the pin directory's identity (device and inode), not its path: two
// paths to the same pins name the same file, and two pin directories never
// share one. "" when bpffs cannot be looked at.
func runFile(lockDir, bpffs, ext string) string {
	var st unix.Stat_t
	if err := unix.Stat(bpffs, &st); err != nil {
		return ""
	}
	return filepath.Join(lockDir, fmt.Sprintf("run-%d_%d-%d%s", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino, ext))
}
