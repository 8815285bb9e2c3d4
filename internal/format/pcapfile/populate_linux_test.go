package pcapfile

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"github.com/gopacket/gopacket/layers"
)

// present reports whether the page at p is in this process's page table
// (bit 63 of its /proc/self/pagemap entry).
func present(t *testing.T, pagemap *os.File, p unsafe.Pointer) bool {
	t.Helper()
	var e [8]byte
	if _, err := pagemap.ReadAt(e[:], int64(uintptr(p)/uintptr(os.Getpagesize()))*8); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(e[:])>>63 == 1
}

// Populate maps a capture's pages a megabyte at a time, in order, without
// reading them, and says when it is done.
func TestPopulate(t *testing.T) {
	frame := make([]byte, 1000)
	var frames [][]byte
	for len(frames)*1016 < 8<<20+100 {
		frames = append(frames, frame)
	}
	path := t.TempDir() + "/c.pcap"
	if err := os.WriteFile(path, pcapOf(t, layers.LinkTypeEthernet, false, frames...), 0o600); err != nil {
		t.Fatal(err)
	}
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer pagemap.Close()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	at := func(off int) unsafe.Pointer { return unsafe.Pointer(&r.mem[off]) }
	mb := 1 << 20
	// Opening reads the file header. The page cache may keep the file in
	// folios of up to 2 MB, which are mapped whole: the checks keep 2 MB
	// away from what was touched.
	for _, off := range []int{4*mb + 4096, 6*mb + 4096} {
		if present(t, pagemap, at(off)) {
			t.Fatalf("page at %d is mapped before Populate", off)
		}
	}
	for i := 0; i < 5; i++ {
		if !r.Populate() {
			t.Fatalf("Populate %d had nothing to do", i+1)
		}
	}
	for _, off := range []int{mb, 4*mb + 4096, 5*mb - 4096} {
		if !present(t, pagemap, at(off)) {
			t.Fatalf("page at %d is not mapped after five Populates", off)
		}
	}
	if present(t, pagemap, at(6*mb+4096)) {
		t.Fatal("Populate went past six megabytes")
	}
	for r.Populate() {
	}
	if !present(t, pagemap, at(len(r.mem)-1)) {
		t.Fatal("the last page is not mapped")
	}
	if r.Populate() {
		t.Fatal("Populate had work after the end")
	}
	// Reading is unchanged.
	n := 0
	for {
		if _, err := r.Next(); err != nil {
			break
		}
		n++
	}
	if n != len(frames) {
		t.Fatalf("read %d packets of %d", n, len(frames))
	}
}
