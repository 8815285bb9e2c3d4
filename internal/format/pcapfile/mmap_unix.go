//go:build unix

package pcapfile

import (
	"os"
	"syscall"
)

// mapFile maps a regular, non-empty file read-only; otherwise it returns nil.
func mapFile(f *os.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 || int64(int(st.Size())) != st.Size() {
		return nil, err
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	adviseSequential(mem)
	return mem, nil
}

func unmapFile(mem []byte) {
	if mem != nil {
		_ = syscall.Munmap(mem)
	}
}
