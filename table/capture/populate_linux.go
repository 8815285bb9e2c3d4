package capture

import "golang.org/x/sys/unix"

// populate maps mem's pages into the page table ahead of the reader,
// a few megabytes per call, until done or stop closes. A page fault
// costs the reader several times what the kernel's batch costs, and the
// batch runs on another CPU. Errors end it quietly: it is only a hint
// (MADV_POPULATE_READ is Linux 5.14 and later), and a file that shrank is
// the reader's to report.
func populate(mem []byte, stop <-chan struct{}) {
	const step = 4 << 20
	for off := 0; off < len(mem); off += step {
		select {
		case <-stop:
			return
		default:
		}
		if err := unix.Madvise(mem[off:min(off+step, len(mem))], unix.MADV_POPULATE_READ); err != nil {
			return
		}
	}
}
