package pcapfile

import (
	"io"
	"os"
	"testing"
)

// go test ./internal/format/pcapfile -bench Read: reading a mapped pcap, the serial
// part of a replay. Read is what the kernel replay does (frames copied,
// valid until Close); Next is what replay --model does (each frame valid
// until the next).
func BenchmarkRead(b *testing.B)     { benchRead(b, false) }
func BenchmarkReadNext(b *testing.B) { benchRead(b, true) }

func benchRead(b *testing.B, next bool) {
	f := "../../../testdata/captures/small.pcap"
	st, err := os.Stat(f)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	n := 0
	for i := 0; i < b.N; i++ {
		r, err := Open(f)
		if err != nil {
			b.Fatal(err)
		}
		read := r.Read
		if next {
			read = r.Next
		}
		for {
			if _, err := read(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
			n++
		}
		r.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/packet")
}
