package loader

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

// BenchmarkDecodeTable is reading one live table of 256 backends back from
// its kernel form, the step every live read repeats for each table.
func BenchmarkDecodeTable(b *testing.B) {
	tc := table.TableConfig{Name: "t", Binds: []table.Bind{{Prefix: netip.MustParsePrefix("10.200.0.1/32"), Proto: table.ProtoTCP, PortStart: 80, PortEnd: 80}}}
	stat := make([]uint8, 256)
	for j := range 256 {
		tc.Backends = append(tc.Backends, table.Backend{IP: netip.MustParseAddr(fmt.Sprintf("10.100.%d.%d", j/200, j%200+1)), State: table.StateActive, Healthy: true})
		stat[j] = uint8(j)
	}
	t, err := table.Build(&tc)
	if err != nil {
		b.Fatal(err)
	}
	dt, err := mapimage.EncodeTable(t, 0, 0, stat, nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := mapimage.DecodeTable(dt); err != nil {
			b.Fatal(err)
		}
	}
}
