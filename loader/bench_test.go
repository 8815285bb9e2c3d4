package loader

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/director/director/bpf"
	"github.com/director/director/internal/pkt"
	"github.com/director/director/internal/testnet"
	"github.com/director/director/table"
	"github.com/director/director/table/model"
)

// BenchmarkProgram measures the program's own cost per packet on real
// traffic, with the kernel's BPF run-time statistics, beside the empty
// XDP_TX program measured the same way in the same run. Frames are sent
// into one end of a veth pair in a private namespace with the program
// attached natively to the other end, so every packet is a fresh frame that
// takes the encapsulation path (the counters prove it). Frames go out in
// sendmmsg bursts of 64, so the program runs on NAPI batches as it does
// behind a NIC. (BPF_PROG_RUN with
// repeats would rerun the already-encapsulated packet, and its live-frames
// mode recycles modified pages without restoring them.) It reports
// kernel-ns/pkt; ns/op is the wall time to inject and process a packet.
//
//	go test ./loader -run '^$' -bench Program -benchtime 200000x
func BenchmarkProgram(b *testing.B) {
	err := testnet.InNetns(func() error { return benchProgram(b) })
	if err != nil {
		b.Fatal(err)
	}
}

func benchProgram(b *testing.B) error {
	if err := testnet.Veth("bench0", "bench1"); err != nil {
		return err
	}
	ifc, err := net.InterfaceByName("bench0")
	if err != nil {
		return err
	}
	d, m := setup(b, directorConfig())
	base, err := Baseline()
	if err != nil {
		return err
	}
	defer base.Close()
	pass, err := PassAll()
	if err != nil {
		return err
	}
	defer pass.Close()
	peer, err := net.InterfaceByName("bench1")
	if err != nil {
		return err
	}
	// The peer needs NAPI to accept XDP_TX'd frames.
	pl, err := link.AttachXDP(link.XDPOptions{Program: pass, Interface: peer.Index, Flags: link.XDPDriverMode})
	if err != nil {
		return err
	}
	defer pl.Close()
	sock, err := testnet.Listen("bench1")
	if err != nil {
		return err
	}
	defer sock.Close()
	stop, err := EnableRunStats()
	if err != nil {
		return err
	}
	defer stop()
	frames := map[string][]byte{
		"ipv4-tcp": pkt.Frame(pkt.IPv4(netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x10, make([]byte, 64)), pkt.V4Opts{})),
		"ipv6-tcp": pkt.Frame(pkt.IPv6(netip.MustParseAddr("2001:db8::9"), netip.MustParseAddr("fd00:20::1"), 6, pkt.TCP(40000, 443, 0x10, make([]byte, 64)))),
	}
	for _, name := range []string{"ipv4-tcp", "ipv6-tcp"} {
		frame := frames[name]
		if m.Process(frame).Verdict != model.XDPTX {
			return fmt.Errorf("%s is not steered", name)
		}
		for _, p := range []struct {
			name string
			prog *ebpf.Program
		}{{"baseline", base}, {"director", d.Prog}} {
			l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
			if err != nil {
				return err
			}
			var ferr error
			b.Run(name+"/"+p.name, func(b *testing.B) {
				before, _ := d.GlobalCounters()
				batch := make([][]byte, b.N)
				for i := range batch {
					batch[i] = frame
				}
				cost, err := MeasureCost(p.prog, func() error { return sock.SendBatch(batch) })
				if err != nil {
					ferr = err
					return
				}
				if cost.Runs < uint64(b.N) {
					ferr = fmt.Errorf("%d runs counted for %d packets", cost.Runs, b.N)
				}
				b.ReportMetric(float64(cost.Runtime.Nanoseconds())/float64(cost.Runs), "kernel-ns/pkt")
				if p.prog == d.Prog {
					after, _ := d.GlobalCounters()
					if got := after[model.CounterEncapsulated] - before[model.CounterEncapsulated]; got != uint64(b.N) {
						ferr = fmt.Errorf("%d of %d packets encapsulated", got, b.N)
					}
				}
			})
			l.Close()
			if ferr != nil {
				return ferr
			}
		}
	}
	return nil
}

// BenchmarkApply compares a full apply of a 256-backend table (a fresh map
// filled with one update, swapped in) with writing the same 65,536 rows one
// map update at a time.
//
//	go test ./loader -run '^$' -bench Apply
func BenchmarkApply(b *testing.B) {
	d, err := Load("")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	dc := directorConfig()
	if err := d.SetConfig(&dc, net.HardwareAddr(pkt.GatewayMAC[:])); err != nil {
		b.Fatal(err)
	}
	cfg, err := table.LoadConfig("../testdata/configs/big256.json")
	if err != nil {
		b.Fatal(err)
	}
	var versions [2][]*table.Table
	for v := range versions {
		tc := cfg.Tables[0]
		tc.Backends = append([]table.Backend(nil), tc.Backends...)
		if v == 1 {
			tc.Backends[3].State = table.StateDraining
		}
		t, err := table.Build(&tc)
		if err != nil {
			b.Fatal(err)
		}
		versions[v] = []*table.Table{t}
	}
	b.Run("full-apply", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := d.Apply(versions[i%2], nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("per-element", func(b *testing.B) {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 12, MaxEntries: table.Rows})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		dt, _ := encodeTable(versions[0][0], 0, 0, make([]uint8, 256))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for r := uint32(0); r < table.Rows; r++ {
				if err := m.Put(r, &dt.Rows[r]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	_ = bpf.DirectorDirRow{}
}
