package pcapfile

import "golang.org/x/sys/unix"

// populate maps mem's pages into the page table. An error (a kernel
// before 5.14, a file that shrank) makes it report false: it is only a
// hint, and a shrunk file is the reader's to report.
func populate(mem []byte) bool {
	return unix.Madvise(mem, unix.MADV_POPULATE_READ) == nil
}

// adviseSequential tells the kernel mem is read front to back, for
// read-ahead. A hint: its error does not matter.
func adviseSequential(mem []byte) { _ = unix.Madvise(mem, unix.MADV_SEQUENTIAL) }
