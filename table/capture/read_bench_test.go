package capture

import (
	"io"
	"os"
	"testing"
)

// go test ./table/capture -bench Read: reading a mapped pcap with shared
// frames, the serial part of replay --model.
func BenchmarkRead(b *testing.B) {
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
		r.ShareFrames()
		for {
			if _, err := r.Read(); err == io.EOF {
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
