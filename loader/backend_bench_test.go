package loader

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

// BenchmarkBackendProgram is the backend program's cost per packet
// (BPF_PROG_RUN, many repeats of one frame, the kernel's own timing) for
// a packet not GUE (the floor), a spoofed one dropped and an unknown
// connection's refused for its untrusted next hop (frames the program
// leaves as they are, as repeats need), with the accepted and trusted tries holding a
// few prefixes and then 1,024 each (their limit): what the LPM lookups
// (issue 46) cost against a small list.
//
//	go test ./loader -run '^$' -bench BackendProgram -benchtime 2000000x
func BenchmarkBackendProgram(b *testing.B) {
	testenv.Kernel(b)
	for _, full := range []bool{false, true} {
		size := "few"
		if full {
			size = "1024"
		}
		for _, c := range []struct {
			name    string
			frame   func(*testing.B) []byte
			counter string
		}{
			{"not-gue", func(b *testing.B) []byte {
				return pkt.Frame(pkt.IPv4(a("10.0.0.2"), a("10.0.0.1"), 6, pkt.TCP(1000, 80, 0x10, nil), pkt.V4Opts{}))
			}, "pass_not_gue"},
			{"spoofed", func(b *testing.B) []byte {
				return spoofed(gueFrame(b, pkt.IPv4(a("10.0.0.2"), a("10.0.0.1"), 6, pkt.TCP(1000, 80, 0x10, nil), pkt.V4Opts{}), 0, a("192.168.77.2")), 12, "203.0.113.9")
			}, "drop_untrusted"},
			{"untrusted-hop", func(b *testing.B) []byte {
				return gueFrame(b, pkt.IPv4(a("10.0.0.2"), a("10.0.0.1"), 6, pkt.TCP(1001, 80, 0x10, nil), pkt.V4Opts{}), 0, a("198.18.5.5"))
			}, "drop_untrusted_hop"},
		} {
			b.Run(size+"/"+c.name, func(b *testing.B) {
				err := testrun.InNetns(func() error {
					b.StopTimer()
					bp, err := LoadBackend("")
					if err != nil {
						return err
					}
					defer bp.Close()
					if err := bp.SetSelf(a("192.168.77.1")); err != nil {
						return err
					}
					accept := []netip.Prefix{pf("192.168.77.1/32"), pf("10.0.0.0/24")}
					trust := []netip.Prefix{pf("192.0.2.1/32"), pf("192.168.77.0/24")}
					if full {
						accept, trust = fill(accept, 100), fill(trust, 200)
					}
					if err := bp.Accept(accept); err != nil {
						return err
					}
					if err := bp.Trust(trust); err != nil {
						return err
					}
					f := c.frame(b)
					before, _ := bp.Counters()
					b.StartTimer()
					_, d, err := bp.Prog().Benchmark(f, b.N, nil)
					b.StopTimer()
					if err != nil {
						return err
					}
					after, _ := bp.Counters()
					if got := after[c.counter] - before[c.counter]; got != uint64(b.N) {
						return fmt.Errorf("%d of %d runs counted as %s", got, b.N, c.counter)
					}
					b.ReportMetric(float64(d.Nanoseconds()), "kernel-ns/pkt")
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// fill is ps with /32s of first.0.0.0/8 added up to 1,024 prefixes.
func fill(ps []netip.Prefix, first byte) []netip.Prefix {
	for i := 0; len(ps) < 1024; i++ {
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom4([4]byte{first, byte(i >> 8), byte(i), 1}), 32))
	}
	return ps
}
