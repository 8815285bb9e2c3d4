package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ensureDir makes dir on a bpffs, mounting bpffs at /sys/fs/bpf if that is
// where dir lives and nothing is mounted there. It refuses a bpffs that
// only this process's mount namespace sees (see checkPersistent).
func ensureDir(dir string) error {
	if !isBPFFS(filepath.Dir(dir)) {
		if filepath.Dir(dir) == "/sys/fs/bpf" || filepath.Clean(dir) == "/sys/fs/bpf" {
			if _, private := privateMountNS(); private {
				return errPrivateMounts("where /sys/fs/bpf is not a bpf filesystem; one mounted there, and everything pinned in it, " +
					"would be gone when the command exits")
			}
			if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"); err != nil {
				return fmt.Errorf("mounting bpffs at /sys/fs/bpf: %w", err)
			}
		}
		if !isBPFFS(filepath.Dir(dir)) {
			return fmt.Errorf("%s is not on a bpf filesystem (mount -t bpf bpf DIR)", filepath.Dir(dir))
		}
	}
	if err := checkPersistent(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := checkOwned(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, pinLinks), 0o700); err != nil {
		return privilegeError("making "+dir, err)
	}
	return os.Chmod(dir, 0o700)
}

// checkOwned refuses a pin directory this user does not own, or that
// others may write: whoever can write it can move pins under the director
// (a failed load by a normal user once left one, into which root then
// loaded). A directory not there yet is fine.
func checkOwned(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid {
		return fmt.Errorf("%s belongs to uid %d, not this user (uid %d): its owner could move pins under this director; "+
			"remove it (rm -r %s) if nothing of it is in use, or choose another --bpffs", dir, st.Uid, uid, dir)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is writable by group or others (mode %#o): anyone who can write it can move pins under this director; "+
			"chmod 0700 %s", dir, st.Mode&0o777, dir)
	}
	return nil
}

// privateMountNS reports whether this process runs in a mount namespace
// other than the host's, as 'ip netns exec' makes one for every command
// it runs, and returns a process in the host's (see hostProcess).
func privateMountNS() (host string, private bool) {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return "", false
	}
	host = hostProcess()
	ns, err := os.Readlink("/proc/" + host + "/ns/mnt")
	return host, err == nil && ns != self
}

// hostProcess names a process in the host's mount namespace: init, or
// where init is not ours to inspect (a sandbox), the process that started
// this one ('ip netns exec' execs the command from the caller's).
func hostProcess() string {
	if _, err := os.Readlink("/proc/1/ns/mnt"); err == nil {
		return "1"
	}
	return fmt.Sprint(os.Getppid())
}

// checkPersistent refuses a bpffs at path that the host's mount namespace
// does not see: one mounted inside a private mount namespace, which goes,
// with everything pinned in it, when the namespace does (for 'ip netns
// exec', when the command exits). A bpffs the host also has mounted (seen
// through a bind mount or an inherited mount) is fine.
func checkPersistent(path string) error {
	host, private := privateMountNS()
	if !private {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil
	}
	data, err := os.ReadFile("/proc/" + host + "/mountinfo")
	if err != nil {
		return nil
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	for _, line := range strings.Split(string(data), "\n") {
		// mountinfo: ID parent MAJOR:MINOR root mountpoint options ... - fstype source options
		f := strings.Fields(line)
		if len(f) > 2 && f[2] == dev {
			return nil
		}
	}
	return errPrivateMounts("where " + path + " is a bpf filesystem the host does not see: everything pinned in it would be gone " +
		"when the command exits")
}

// errPrivateMounts explains why pinning in a private mount namespace is
// refused, and what to do instead; what completes "runs in a private mount
// namespace ...".
func errPrivateMounts(what string) error {
	return fmt.Errorf("this command runs in a private mount namespace (as 'ip netns exec' gives every command), %s. "+
		"Run it in the network namespace alone, keeping the host's mounts: nsenter --net=/run/netns/NAME director ... "+
		"(or mount bpffs at /sys/fs/bpf on the host first)", what)
}

func isBPFFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && uint32(st.Type) == unix.BPF_FS_MAGIC
}

// chmodPins makes every pinned object readable and writable by root only.
func chmodPins(dir string) error {
	return filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if e.IsDir() {
			mode = 0o700
		}
		return os.Chmod(p, mode)
	})
}

// lockDir serialises changes to a director: an exclusive flock on the pin
// directory itself (bpffs holds no regular files). The kernel drops it if
// the process dies, so a killed apply never leaves it stuck.
func lockDir(dir string) (unlock func(), err error) {
	if dir == "" { // a private instance: this process is its only user
		return func() {}, nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}
