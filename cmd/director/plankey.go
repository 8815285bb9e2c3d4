package main

import (
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/director/director/internal/service/status"
	"github.com/director/director/table"
)

// planKeyDir holds the host's key for plans' carried rows (table.Sealer):
// the run directory, root's.
var planKeyDir = status.DefaultLockDir

const planKeySize = 32

// planKey is the host's key for sealing the rows a plan carries, made on
// first use: 32 random bytes in planKeyDir/plan.key, mode 0600. Anything
// amiss (a directory others may write, a file not this user's or open to
// others, a link) gives no key, and plans then carry no rows: apply
// builds every table, slower but the same.
func planKey() table.Sealer {
	var st unix.Stat_t
	if err := os.MkdirAll(planKeyDir, 0o755); err != nil || unix.Lstat(planKeyDir, &st) != nil ||
		st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uint32(os.Geteuid()) || st.Mode&0o022 != 0 {
		return nil
	}
	path := filepath.Join(planKeyDir, "plan.key")
	for range 2 {
		if k := readPlanKey(path); k != nil {
			return k
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue // made meanwhile, or not one: read it again
		} else if err != nil {
			return nil
		}
		k := make([]byte, planKeySize)
		rand.Read(k)
		_, err = f.Write(k)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err != nil || cerr != nil {
			os.Remove(path)
			return nil
		}
		return k
	}
	return nil
}

func readPlanKey(path string) table.Sealer {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) ||
		st.Mode&0o077 != 0 || st.Size != planKeySize {
		return nil
	}
	k := make([]byte, planKeySize)
	if _, err := io.ReadFull(f, k); err != nil {
		return nil
	}
	return k
}
