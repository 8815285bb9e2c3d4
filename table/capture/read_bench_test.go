package capture

import (
	"io"
	"os"
	"testing"
)

// go test ./table/capture -bench Read: reading a mapped pcap, the serial
// part of a replay. ReadShared is what the kernel replay does (frames
// shared from the mapping, valid until Close); ReadNext is what replay
// --model does (each frame valid until the next).
func BenchmarkReadShared(b *testing.B) { benchRead(b, true) }
func BenchmarkReadNext(b *testing.B)   { benchRead(b, false) }

func benchRead(b *testing.B, shared bool) {
	f := "../../testdata/captures/small.pcap"
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
		read := r.Next
		if shared {
			r.ShareFrames()
			read = r.Read
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
