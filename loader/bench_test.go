package loader

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/director/director/bpf"
	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/loader/xdpmode"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
	"github.com/director/director/table/quiclb/cidcipher"
)

// BenchmarkProgram measures the program's own cost per packet on real
// traffic, with the kernel's BPF run-time statistics, beside the empty
// XDP_TX program measured the same way in the same run. The program is
// attached natively to one end of a veth pair in a private namespace, and a
// traffic generator (BPF_PROG_RUN in live-frames mode redirecting into the
// other end) feeds it, so it runs on NAPI batches of fresh frames as it does
// behind a NIC, and every packet takes the encapsulation path (the counters
// prove it). It reports kernel-ns/pkt; ns/op is the wall time per packet of
// the whole loop (generate, redirect, steer, transmit back).
//
//	go test ./loader -run '^$' -bench Program -benchtime 200000x
func BenchmarkProgram(b *testing.B) {
	testenv.Kernel(b)
	frames := []struct {
		name  string
		frame []byte
	}{
		{"ipv4-tcp", pkt.Frame(pkt.IPv4(netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x10, make([]byte, 64)), pkt.V4Opts{}))},
		{"ipv6-tcp", pkt.Frame(pkt.IPv6(netip.MustParseAddr("2001:db8::9"), netip.MustParseAddr("fd00:20::1"), 6, pkt.TCP(40000, 443, 0x10, make([]byte, 64))))},
	}
	for _, f := range frames {
		for _, which := range []string{"baseline", "director"} {
			b.Run(f.name+"/"+which, func(b *testing.B) {
				// Everything, the sending included, happens on the thread
				// inside the private namespace: interface indices mean
				// nothing outside it.
				err := testrun.InNetns(func() error {
					cost, err := benchProgram(b, f.frame, which == "director", b.N)
					if err != nil {
						return err
					}
					b.ReportMetric(float64(cost.Runtime.Nanoseconds())/float64(cost.Runs), "kernel-ns/pkt")
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// benchProgram feeds n copies of frame to the director (or the empty
// program) on a testrun.Rig and returns the program's run-time stats.
func benchProgram(b *testing.B, frame []byte, director bool, n int) (testrun.Cost, error) {
	d, m := setup(b, directorConfig())
	if m.Process(frame).Verdict != model.XDPTX {
		return testrun.Cost{}, fmt.Errorf("frame is not steered")
	}
	prog := d.Prog
	if !director {
		var err error
		if prog, err = testrun.Baseline(); err != nil {
			return testrun.Cost{}, err
		}
		defer prog.Close()
	}
	rig, err := testrun.NewRig("bench0", prog, xdpmode.Native)
	if err != nil {
		return testrun.Cost{}, err
	}
	defer rig.Close()
	before, _ := d.GlobalCounters()
	b.ResetTimer()
	cost, err := rig.Send([][]byte{frame}, uint32(n))
	b.StopTimer()
	if err != nil {
		return testrun.Cost{}, err
	}
	// The generator can outpace the receiving ring, which then drops
	// frames before the program sees them; the kernel's own packets (IPv6
	// neighbour discovery) add a handful of runs. Every run of the
	// director on a generated frame must have encapsulated it.
	if cost.Runs < uint64(n)/10 || cost.Runs > uint64(n)+100 {
		return testrun.Cost{}, fmt.Errorf("%d runs counted for %d packets", cost.Runs, n)
	}
	if director {
		after, _ := d.GlobalCounters()
		got := after[abi.CEncapsulated] - before[abi.CEncapsulated]
		if got > cost.Runs || got+100 < cost.Runs {
			return testrun.Cost{}, fmt.Errorf("%d of %d runs encapsulated", got, cost.Runs)
		}
	}
	return cost, nil
}

// BenchmarkApply compares a full apply of a 256-backend table (a fresh map
// filled with one update, swapped in) with writing the same 65,536 rows one
// map update at a time.
//
//	go test ./loader -run '^$' -bench Apply
func BenchmarkApply(b *testing.B) {
	testenv.Kernel(b)
	d, err := Load("")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	dc := directorConfig()
	if err := d.SetConfig(&dc, dc.GatewayMAC); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.ParseFile("../testdata/configs/big256.json")
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
			if _, err := d.apply(versions[i%2], nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("per-element", func(b *testing.B) {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: uint32(unsafe.Sizeof(abi.Row{})), MaxEntries: table.Rows})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		dt, _ := mapimage.EncodeTable(versions[0][0], 0, 0, make([]uint8, 256), nil)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for r := uint32(0); r < table.Rows; r++ {
				if err := m.Put(r, &dt.Rows[r]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	_ = abi.Row{}
}

// BenchmarkProgramPaired measures what BenchmarkProgram does, in a way a
// shared machine's noise disturbs less: the empty XDP_TX program and the
// director run on two veth pairs side by side, and windows of traffic
// alternate between them (the order flips every window). Reported are the
// medians over the windows of each program's kernel-ns/pkt, the median of
// the per-window differences (above-ns/pkt) and the smallest difference
// (above-min-ns/pkt). "4096flows" cycles through frames from 4,096 client
// addresses, so the rows and backend counters it touches vary.
//
//	go test ./loader -run '^$' -bench ProgramPaired -benchtime 4000000x
func BenchmarkProgramPaired(b *testing.B) {
	testenv.Kernel(b)
	for _, c := range programCases() {
		b.Run(c.name, func(b *testing.B) {
			err := testrun.InNetns(func() error { return benchPaired(b, c.dc(), c.cfg, c.frames) })
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// programCase is a kind of packet the program benchmarks send, with the
// config that steers it.
type programCase struct {
	name   string
	cfg    string
	frames [][]byte
	edit   func(*table.DirectorConfig) // the director config, when not the default
}

func (c programCase) dc() table.DirectorConfig {
	dc := directorConfig()
	if c.edit != nil {
		c.edit(&dc)
	}
	return dc
}

// programCases are the kinds of packet ProgramPaired and ProgramAB measure.
func programCases() []programCase {
	return []programCase{
		{"ipv4-tcp", testConfig, [][]byte{benchTCP4(9)}, nil},
		{"ipv4-tcp-4096flows", testConfig, benchFlows(), nil},
		{"ipv6-tcp", testConfig, [][]byte{benchTCP6()}, nil},
		// UDP to a table without QUIC-LB routing: what a quic block
		// elsewhere must not cost it.
		{"ipv4-udp", testConfig, [][]byte{benchUDP4("10.20.0.9", 1500, benchQUICPayload(0x5e, 0x02))}, nil},
		// Hashes other than the default (source address alone) go through
		// a call to dir_hash_fields.
		{"ipv4-tcp-all-fields", testConfig, [][]byte{benchTCP4(9)}, func(dc *table.DirectorConfig) {
			dc.HashFields = table.HashSrcAddr | table.HashDstAddr | table.HashSrcPort | table.HashDstPort
		}},
		{"ipv4-tcp-alt-hash", testConfig, [][]byte{benchTCP4(9)}, func(dc *table.DirectorConfig) {
			dc.AltHashFields = table.HashSrcAddr | table.HashSrcPort
		}},
		// The binds of GLB's example config: an exact bind, a port range on
		// the same address, a prefix.
		{"binds/exact", bindsConfig, benchTo("192.0.2.1", 80), nil},
		{"binds/range", bindsConfig, benchTo("192.0.2.1", 8080), nil},
		{"binds/prefix", bindsConfig, benchTo("198.18.0.77", 80), nil},
	}
}

// benchTCP4 is a TCP packet from the i-th of 65,536 clients to testConfig's
// IPv4 bind.
func benchTCP4(i int) []byte {
	src := netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)})
	return pkt.Frame(pkt.IPv4(src, netip.MustParseAddr("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x10, make([]byte, 64)), pkt.V4Opts{}))
}

// benchTCP6 is a TCP packet to testConfig's IPv6 bind.
func benchTCP6() []byte {
	return pkt.Frame(pkt.IPv6(netip.MustParseAddr("2001:db8::9"), netip.MustParseAddr("fd00:20::1"), 6, pkt.TCP(40000, 443, 0x10, make([]byte, 64))))
}

// benchFlows are packets of as many flows as the traffic generator holds
// (4,096).
func benchFlows() [][]byte {
	var fs [][]byte
	for i := 0; i < testrun.TrafficgenMaxFrames; i++ {
		fs = append(fs, benchTCP4(i))
	}
	return fs
}

// benchCopies is as many copies of frame as the generator holds.
func benchCopies(frame []byte) [][]byte {
	fs := make([][]byte, testrun.TrafficgenMaxFrames)
	for i := range fs {
		fs[i] = frame
	}
	return fs
}

// benchTo is a TCP packet to dst:port (bindsConfig's binds).
func benchTo(dst string, port uint16) [][]byte {
	return [][]byte{pkt.Frame(pkt.IPv4(netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr(dst), 6, pkt.TCP(40000, port, 0x10, make([]byte, 64)), pkt.V4Opts{}))}
}

// BenchmarkProgramVersus measures the targets that compare two kinds of
// packet ("prefix binds within 10 ns of exact ones") directly: one
// director on one veth pair gets windows of traffic that alternate between
// the two kinds (the order flips every window), so the noise of a shared
// machine, which moves both alike within a window, cancels in the
// per-window difference. Reported are the medians over the windows of
// each kind's kernel-ns/pkt and of the differences (diff-ns/pkt, the
// second kind's cost minus the first's), with the differences' quartiles.
// The empty program's cost, the same for both, cancels too.
//
//	go test ./loader -run '^$' -bench ProgramVersus -benchtime 4000000x
//
// underlayConfig is two tables alike but for their backends' family: the
// same inner packet, to 10.70.0.1 or 10.70.0.2, goes over IPv4 or IPv6.
const underlayConfig = `{"tables": [
 {"name": "over4", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
  "binds": [{"ip": "10.70.0.1", "proto": "tcp", "port": 80}],
  "backends": [{"ip": "192.168.70.1", "state": "active", "healthy": true}, {"ip": "192.168.70.2", "state": "active", "healthy": true},
               {"ip": "192.168.70.3", "state": "active", "healthy": true}]},
 {"name": "over6", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
  "binds": [{"ip": "10.70.0.2", "proto": "tcp", "port": 80}],
  "backends": [{"ip": "fd00:70::1", "state": "active", "healthy": true}, {"ip": "fd00:70::2", "state": "active", "healthy": true},
               {"ip": "fd00:70::3", "state": "active", "healthy": true}]}
]}`

// quicBenchConfig is two tables alike but for QUIC-LB routing: UDP to
// 10.71.0.1:443 follows the rows, to 10.71.0.2:443 the connection IDs
// (config 1, two-byte server IDs) first.
var quicBenchConfig = func() string {
	t := func(name, vip, quic string) string {
		return `{"name": "` + name + `", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", ` + quic + `
  "binds": [{"ip": "` + vip + `", "proto": "udp", "port": 443}],
  "backends": [{"ip": "192.168.71.1", "state": "active", "healthy": true, "server_id": "5e01"},
               {"ip": "192.168.71.2", "state": "active", "healthy": true, "server_id": "5e02"},
               {"ip": "192.168.71.3", "state": "active", "healthy": true, "server_id": "5e03"}]}`
	}
	plain := strings.NewReplacer(`, "server_id": "5e01"`, "", `, "server_id": "5e02"`, "", `, "server_id": "5e03"`, "").Replace(t("plain", "10.71.0.1", ""))
	return `{"tables": [` + plain + `, ` + t("quic", "10.71.0.2", `"quic": {"config_id": 1, "server_id_len": 2, "nonce_len": 6},`) + `]}`
}()

// quicEncryptedBench are the tables of quicEncryptedBenchConfig that
// route by encrypted IDs: their VIPs, server ID and nonce lengths.
var quicEncryptedBench = []struct {
	name, vip        string
	sidLen, nonceLen int
}{
	{"single", "10.72.0.2", 2, 14}, // one AES block: single pass
	{"four3", "10.72.0.3", 2, 6},   // four passes, the server ID in the left half: undone in three
	{"four4", "10.72.0.4", 7, 6},   // four passes, the server ID past the left half: undone in four
}

// quicEncryptedBenchKey is quicEncryptedBenchConfig's QUIC-LB key.
var quicEncryptedBenchKey = [16]byte{0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 0x25, 0x69, 0x34, 0xe5, 0x0c, 0x66, 0x20, 0x7f}

// quicEncryptedBenchConfig is a table without QUIC-LB routing (UDP to
// 10.72.0.1:443) and, alike but for it, those of quicEncryptedBench.
var quicEncryptedBenchConfig = func() string {
	t := func(name, vip, quic string, sidLen int) string {
		var bs []string
		for i := 1; i <= 3; i++ {
			sid := ""
			if sidLen > 0 {
				sid = fmt.Sprintf(`, "server_id": "%s"`, strings.Repeat(fmt.Sprintf("%02x", 0x5e+i), sidLen))
			}
			bs = append(bs, fmt.Sprintf(`{"ip": "192.168.72.%d", "state": "active", "healthy": true%s}`, i, sid))
		}
		return `{"name": "` + name + `", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", ` + quic + `
  "binds": [{"ip": "` + vip + `", "proto": "udp", "port": 443}], "backends": [` + strings.Join(bs, ", ") + `]}`
	}
	tables := []string{t("plain", "10.72.0.1", "", 0)}
	for _, q := range quicEncryptedBench {
		tables = append(tables, t(q.name, q.vip, fmt.Sprintf(`"quic": {"config_id": 1, "server_id_len": %d, "nonce_len": %d, "key": "%x"},`,
			q.sidLen, q.nonceLen, quicEncryptedBenchKey), q.sidLen))
	}
	return `{"tables": [` + strings.Join(tables, ", ") + `]}`
}()

// benchQUICEncrypted is a 1-RTT QUIC packet to the second backend of the
// quicEncryptedBench table i, its ID encrypted.
func benchQUICEncrypted(i int) []byte {
	q := quicEncryptedBench[i]
	c, err := cidcipher.New(quicEncryptedBenchKey, q.sidLen, q.nonceLen)
	if err != nil {
		panic(err)
	}
	plain := append(bytes.Repeat([]byte{0x60}, q.sidLen), make([]byte, q.nonceLen)...)
	plain[q.sidLen] = 7
	p := []byte{0x41, 1<<5 | byte(q.sidLen+q.nonceLen)}
	p = append(p, make([]byte, c.Len())...)
	c.Encrypt(p[2:], plain)
	return append(p, make([]byte, 64)...)
}

// benchQUICPayload is a 1-RTT QUIC packet (a short header) to the
// connection ID of config 1 that carries server ID a, b.
func benchQUICPayload(a, b byte) []byte {
	p := []byte{0x41, 1<<5 | 8, a, b, 1, 2, 3, 4, 5, 6}
	return append(p, make([]byte, 64)...)
}

// benchUDP4 is a UDP packet from a client to dst:port.
func benchUDP4(dst string, port uint16, payload []byte) []byte {
	return pkt.Frame(pkt.IPv4(netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr(dst), 17, pkt.UDP(40000, port, payload), pkt.V4Opts{}))
}

func BenchmarkProgramVersus(b *testing.B) {
	testenv.Kernel(b)
	cases := []struct {
		name         string
		cfg          string
		base, versus [][]byte
	}{
		{"range-vs-exact", bindsConfig, benchTo("192.0.2.1", 80), benchTo("192.0.2.1", 8080)},
		{"prefix-vs-exact", bindsConfig, benchTo("192.0.2.1", 80), benchTo("198.18.0.77", 80)},
		{"ipv6-vs-ipv4", testConfig, [][]byte{benchTCP4(9)}, [][]byte{benchTCP6()}},
		{"4096flows-vs-1", testConfig, [][]byte{benchTCP4(9)}, benchFlows()},
		// The generator copies each packet from its own prepared frame,
		// so 4,096 frames cost the CPU's caches the same whether they are
		// one flow or 4,096: this compares only what the program does
		// per flow.
		{"4096flows-vs-4096copies", testConfig, benchCopies(benchTCP4(9)), benchFlows()},
		// The IPv6 underlay against the IPv4 one, for the same inner packet.
		{"underlay6-vs-underlay4", underlayConfig, benchTo("10.70.0.1", 80), benchTo("10.70.0.2", 80)},
		// A QUIC packet routed by its connection ID against the same packet
		// to a table alike without QUIC-LB routing; and one whose ID names
		// no backend (it looks up the ID, then falls back to its row).
		{"quic-routed-vs-udp", quicBenchConfig, [][]byte{benchUDP4("10.71.0.1", 443, benchQUICPayload(0x5e, 0x02))},
			[][]byte{benchUDP4("10.71.0.2", 443, benchQUICPayload(0x5e, 0x02))}},
		// Encrypted IDs, each way of decrypting, against the same packet to
		// a table alike without QUIC-LB routing.
		{"quic-single-pass-vs-udp", quicEncryptedBenchConfig, [][]byte{benchUDP4("10.72.0.1", 443, benchQUICEncrypted(0))},
			[][]byte{benchUDP4(quicEncryptedBench[0].vip, 443, benchQUICEncrypted(0))}},
		{"quic-four-pass-3-vs-udp", quicEncryptedBenchConfig, [][]byte{benchUDP4("10.72.0.1", 443, benchQUICEncrypted(1))},
			[][]byte{benchUDP4(quicEncryptedBench[1].vip, 443, benchQUICEncrypted(1))}},
		{"quic-four-pass-4-vs-udp", quicEncryptedBenchConfig, [][]byte{benchUDP4("10.72.0.1", 443, benchQUICEncrypted(2))},
			[][]byte{benchUDP4(quicEncryptedBench[2].vip, 443, benchQUICEncrypted(2))}},
		{"quic-unknown-id-vs-udp", quicBenchConfig, [][]byte{benchUDP4("10.71.0.1", 443, benchQUICPayload(0x5e, 0x77))},
			[][]byte{benchUDP4("10.71.0.2", 443, benchQUICPayload(0x5e, 0x77))}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			err := testrun.InNetns(func() error { return benchVersus(b, c.cfg, c.base, c.versus) })
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

func benchVersus(b *testing.B, cfg string, base, versus [][]byte) error {
	dc := directorConfig()
	underlay6(&dc)
	d, m := setupWith(b, dc, cfg)
	for i, f := range append(slices.Clone(base), versus...) {
		if m.Process(f).Verdict != model.XDPTX {
			return fmt.Errorf("frame %d is not steered", i)
		}
	}
	return versusOn(b, d, base, versus, "base", "versus")
}

// versusOn runs windows of base and versus in turn through d's program
// on a rig of its own, and reports their costs as names say.
func versusOn(b *testing.B, d *Director, base, versus [][]byte, names ...string) error {
	rig, err := testrun.NewRig("versus0", d.Prog, xdpmode.Native)
	if err != nil {
		return err
	}
	defer rig.Close()
	send := func(frames [][]byte) func(uint32) (testrun.Cost, error) {
		return func(per uint32) (testrun.Cost, error) { return rig.Send(frames, per) }
	}
	ns, diff, _, err := alternate(b, uint32(max(b.N/40, 10000)), [2]func(uint32) (testrun.Cost, error){send(base), send(versus)})
	if err != nil {
		return err
	}
	reportDiff(b, ns, diff, names[0], names[1])
	return nil
}

var abObject = flag.String("ab.object", "", "BenchmarkProgramAB: the other build's director BPF object (bpf/director_bpfel.o) to compare this build's with; none: this build's with itself")

// BenchmarkProgramAB compares this build's program with another build's
// (-ab.object, an object whose maps are laid out as this build's), in one
// run rather than runs of two test binaries, which a shared machine's
// drift between runs separates by more than most changes: each build is
// loaded as a director on its own veth pair, and windows of the same
// traffic alternate between them (the order flips every window). Reported
// are each build's median kernel-ns/pkt (a-ns: the other build, b-ns:
// this one) and the median of the per-window differences, this build's
// cost minus the other's, with their quartiles. Without -ab.object both
// are this build: the differences then show what the two veth pairs alone
// make of the same program.
//
//	go test -c -o new.test ./loader  # and in the other build's tree:
//	./new.test -test.run '^$' -test.bench ProgramAB -test.benchtime 4000000x -ab.object OTHER/bpf/director_bpfel.o
func BenchmarkProgramAB(b *testing.B) {
	testenv.Kernel(b)
	for _, c := range programCases() {
		b.Run(c.name, func(b *testing.B) {
			err := testrun.InNetns(func() error { return benchAB(b, c.dc(), c.cfg, c.frames) })
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

func benchAB(b *testing.B, dc table.DirectorConfig, cfg string, frames [][]byte) error {
	var ds [2]*Director
	for i := range ds {
		if i == 0 && *abObject != "" {
			defer func(orig func() (*ebpf.CollectionSpec, error)) { directorSpec = orig }(directorSpec)
			directorSpec = func() (*ebpf.CollectionSpec, error) {
				spec, err := ebpf.LoadCollectionSpec(*abObject)
				if err != nil {
					return nil, err
				}
				// Maps this build added, which the other's program never
				// reads: created all the same, so that it loads; and
				// maps whose type this build changed (QUIC-LB's, arrays
				// before hashes), as this build's, which this loader
				// writes: the other's program reads them only for QUIC
				// tables. Both objects as they are embedded (the capture
				// section is made a map after).
				cur, err := bpf.LoadDirector()
				if err != nil {
					return nil, err
				}
				for name, m := range cur.Maps {
					if o, ok := spec.Maps[name]; !ok || o.Type != m.Type {
						spec.Maps[name] = m
					}
				}
				return spec, nil
			}
		}
		ds[i], _ = setupWith(b, dc, cfg)
		directorSpec = embeddedSpec
	}
	return benchTwo(b, ds, frames)
}

// BenchmarkProgramManyBinds measures whether a packet's cost depends on
// how many binds there are: as ProgramAB, but both directors are this
// build, one serving bindsConfig (three binds) and the other the same
// table among 32 tables of 256 binds (8,192, each to its own address,
// half of them port ranges). diff-ns/pkt is the second's cost minus the
// first's. As a director runs, bindsConfig's range and prefix are spelled
// out in the exact table alone, but not all among 8,192 binds (the
// budget goes to smaller ranges first); the group-path cases turn
// spelling out off in both, and measure the group path alone.
//
//	go test ./loader -run '^$' -bench ProgramManyBinds -benchtime 4000000x
func BenchmarkProgramManyBinds(b *testing.B) {
	testenv.Kernel(b)
	cases := []struct {
		name    string
		frames  [][]byte
		spelled bool
	}{
		{"exact", benchTo("192.0.2.1", 80), true},
		{"range", benchTo("192.0.2.1", 8080), true},
		{"prefix", benchTo("198.18.0.77", 80), true},
		{"group-path/range", benchTo("192.0.2.1", 8080), false},
		{"group-path/prefix", benchTo("198.18.0.77", 80), false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			err := testrun.InNetns(func() error {
				var ds [2]*Director
				for i, cfg := range []string{bindsConfig, manyBindsConfig()} {
					ds[i], _ = setupSpelling(b, directorConfig(), cfg, c.spelled)
				}
				return benchTwo(b, ds, c.frames)
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// manyBindsConfig is bindsConfig's table, its binds filled up to 256, among
// 31 more tables of 256 binds: each bind to its own address in
// 100.64.0.0/10, every other one a port range.
func manyBindsConfig() string {
	var ts []string
	for t := 0; t < mapimage.MaxTables; t++ {
		var binds []string
		n := table.MaxBinds
		if t == 0 {
			binds = append(binds, `{"ip": "192.0.2.1", "proto": "tcp", "port": 80}, {"ip": "192.0.2.1", "proto": "tcp", "port_start": 8000, "port_end": 9000},
            {"ip": "198.18.0.0/24", "proto": "tcp", "port": 80}`)
			n -= 3
		}
		for i := 0; i < n; i++ {
			a := netip.AddrFrom4([4]byte{100, 64 + byte(t), byte(i), 1})
			if i%2 == 0 {
				binds = append(binds, fmt.Sprintf(`{"ip": "%s", "proto": "tcp", "port": 443}`, a))
			} else {
				binds = append(binds, fmt.Sprintf(`{"ip": "%s", "proto": "tcp", "port_start": 1000, "port_end": 2000}`, a))
			}
		}
		ts = append(ts, fmt.Sprintf(`{"name": "t%d", "hash_key": "00112233445566778899aabbccddee%02x", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1%02x",
  "binds": [%s],
  "backends": [{"ip": "10.1.%d.1", "state": "active", "healthy": true}, {"ip": "10.1.%d.2", "state": "active", "healthy": true},
               {"ip": "10.1.%d.3", "state": "active", "healthy": true}, {"ip": "10.1.%d.4", "state": "active", "healthy": true}]}`,
			t, t, t, strings.Join(binds, ", "), t, t, t, t))
	}
	return `{"tables": [` + strings.Join(ts, ",\n") + `]}`
}

// benchTwo runs the same frames through two directors, each on its own
// veth pair, windows alternating, and reports each one's median cost and
// the median of the per-window differences (the second's minus the
// first's) with their quartiles.
func benchTwo(b *testing.B, ds [2]*Director, frames [][]byte) error {
	var rigs [2]*testrun.Rig
	for i, d := range ds {
		var err error
		if rigs[i], err = testrun.NewRig(fmt.Sprintf("ab%d", i), d.Prog, xdpmode.Native); err != nil {
			return err
		}
		defer rigs[i].Close()
	}
	send := func(r *testrun.Rig) func(uint32) (testrun.Cost, error) {
		return func(per uint32) (testrun.Cost, error) { return r.Send(frames, per) }
	}
	ns, diff, _, err := alternate(b, uint32(max(b.N/40, 10000)), [2]func(uint32) (testrun.Cost, error){send(rigs[0]), send(rigs[1])})
	if err != nil {
		return err
	}
	for i, d := range ds {
		got, err := d.GlobalCounters()
		if err != nil {
			return err
		}
		if got[abi.CEncapsulated] == 0 {
			return fmt.Errorf("director %d encapsulated nothing", i)
		}
	}
	reportDiff(b, ns, diff, "a", "b")
	return nil
}

// bindsConfig has an exact bind, a port range on the same address and a
// prefix bind.
const bindsConfig = `{"tables": [{"name": "web", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
  "binds": [{"ip": "192.0.2.1", "proto": "tcp", "port": 80}, {"ip": "192.0.2.1", "proto": "tcp", "port_start": 8000, "port_end": 9000},
            {"ip": "198.18.0.0/24", "proto": "tcp", "port": 80}],
  "backends": [{"ip": "10.1.0.1", "state": "active", "healthy": true}, {"ip": "10.1.0.2", "state": "active", "healthy": true},
               {"ip": "10.1.0.3", "state": "active", "healthy": true}, {"ip": "10.1.0.4", "state": "active", "healthy": true}]}]}`

func benchPaired(b *testing.B, dc table.DirectorConfig, cfg string, frames [][]byte) error {
	d, m := setupWith(b, dc, cfg)
	for i, f := range frames {
		if m.Process(f).Verdict != model.XDPTX {
			return fmt.Errorf("frame %d is not steered", i)
		}
	}
	base, err := testrun.Baseline()
	if err != nil {
		return err
	}
	defer base.Close()
	// Two rigs side by side: the empty program's and the director's.
	var rigs [2]*testrun.Rig
	for i, p := range []*ebpf.Program{base, d.Prog} {
		if rigs[i], err = testrun.NewRig(fmt.Sprintf("pair%d", i), p, xdpmode.Native); err != nil {
			return err
		}
		defer rigs[i].Close()
	}

	before, _ := d.GlobalCounters()
	send := func(r *testrun.Rig) func(uint32) (testrun.Cost, error) {
		return func(per uint32) (testrun.Cost, error) { return r.Send(frames, per) }
	}
	ns, diff, runs, err := alternate(b, uint32(max(b.N/20, 10000)), [2]func(uint32) (testrun.Cost, error){send(rigs[0]), send(rigs[1])})
	if err != nil {
		return err
	}
	after, _ := d.GlobalCounters()
	if got := after[abi.CEncapsulated] - before[abi.CEncapsulated]; got > runs[1] || got+100 < runs[1] {
		return fmt.Errorf("%d of %d runs encapsulated", got, runs[1])
	}
	b.ReportMetric(median(ns[0]), "base-ns/pkt")
	b.ReportMetric(median(ns[1]), "director-ns/pkt")
	b.ReportMetric(median(diff), "above-ns/pkt")
	b.ReportMetric(slices.Min(diff), "above-min-ns/pkt")
	return nil
}

// alternate sends windows of traffic to two sides, per packets a window
// each (send[i]), the order flipping every window, and returns each
// side's kernel-ns/pkt per window, the per-window differences (side 1's
// minus side 0's) and each side's runs. The paired benchmarks all measure
// this way: the machine's noise moves both sides alike within a window.
func alternate(b *testing.B, per uint32, send [2]func(uint32) (testrun.Cost, error)) (ns [2][]float64, diff []float64, runs [2]uint64, err error) {
	const windows = 20
	b.ResetTimer()
	for w := 0; w < windows; w++ {
		order := []int{0, 1}
		if w%2 == 1 {
			order[0], order[1] = 1, 0
		}
		var cost [2]float64
		for _, i := range order {
			c, err := send[i](per)
			if err != nil {
				return ns, nil, runs, err
			}
			if c.Runs < uint64(per)/10 {
				return ns, nil, runs, fmt.Errorf("%d runs counted for %d packets", c.Runs, per)
			}
			cost[i] = float64(c.Runtime.Nanoseconds()) / float64(c.Runs)
			ns[i] = append(ns[i], cost[i])
			runs[i] += c.Runs
		}
		diff = append(diff, cost[1]-cost[0])
	}
	b.StopTimer()
	return ns, diff, runs, nil
}

// reportDiff reports the medians of two sides' costs, named a and b, and
// of their per-window differences, with the differences' quartiles.
func reportDiff(b *testing.B, ns [2][]float64, diff []float64, a, bn string) {
	slices.Sort(diff)
	b.ReportMetric(median(ns[0]), a+"-ns/pkt")
	b.ReportMetric(median(ns[1]), bn+"-ns/pkt")
	b.ReportMetric(median(diff), "diff-ns/pkt")
	b.ReportMetric(diff[len(diff)/4], "diff-q1-ns/pkt")
	b.ReportMetric(diff[len(diff)*3/4], "diff-q3-ns/pkt")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkCaptureLoad is a capture at line rate: the generator sends as
// fast as it can, every frame eligible, the default rate cap (5,000 a
// second on each CPU), a reader draining the events, in windows
// alternating with the capture off, each on window compared with the off
// one before it. on- and off-ns/pkt are the program's cost per packet (its
// own run time) with and without in the last pair, slower-% the median
// pair's difference as a share; off- and on-Mpps the datapath's rate (packets a
// second through the generator, veth and program, all on one CPU), and
// rate-drop-% the median pair's drop, the measure; kept and
// rate-capped what the capture took and refused (the refused are counted,
// as 'director capture' reports at its end).
//
//	go test ./loader -run '^$' -bench CaptureLoad -benchtime 40000000x
func BenchmarkCaptureLoad(b *testing.B) {
	testenv.Kernel(b)
	err := testrun.InNetns(func() error {
		d, _ := setupWith(b, directorConfig(), bindsConfig)
		rig, err := testrun.NewRig("capload0", d.Prog, xdpmode.Native)
		if err != nil {
			return err
		}
		defer rig.Close()
		c, err := d.Capture(CaptureFilter{Table: -1, Rate: captureLoadRate()})
		if err != nil {
			return err
		}
		// The generator (and with it the program) on CPU 0, the reader on
		// CPU 1, as a capture's process runs beside the NIC's queues:
		// measured otherwise, the two share a CPU by chance, and runs
		// differ by more than what is measured.
		pin := func(cpu int) error {
			var set unix.CPUSet
			set.Set(cpu % runtime.NumCPU())
			return unix.SchedSetaffinity(0, &set)
		}
		if err := pin(0); err != nil {
			return err
		}
		kept := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			pin(1)
			for {
				if _, err := c.Read(); err != nil {
					return
				}
				kept++
			}
		}()
		var on abi.Capture
		if err := d.Maps.Capture.Lookup(uint32(0), &on); err != nil {
			return err
		}
		off := on
		off.On = 0
		frames := benchTo("192.0.2.1", 80)
		// Windows long beside the cap's second (b.N/16 packets each,
		// alternating), compared in pairs; the median pair is reported.
		const windows = 16
		per := uint32(max(b.N/windows, 10000))
		var cost [2]testrun.Cost
		var slower, drop []float64
		ns := func(c testrun.Cost) float64 { return float64(c.Runtime.Nanoseconds()) / float64(max(c.Runs, 1)) }
		// The datapath's rate: packets through it a second of the
		// generator's, which sends at full speed on one CPU.
		mpps := func(c testrun.Cost) float64 { return float64(c.Runs) / c.Wall.Seconds() / 1e6 }
		b.ResetTimer()
		for w := 0; w < windows; w++ {
			side := w % 2
			v := &off
			if side == 1 {
				v = &on
			}
			if err := d.Maps.Capture.Put(uint32(0), v); err != nil {
				return err
			}
			c1, err := rig.Send(frames, per)
			if err != nil {
				return err
			}
			if side == 1 {
				slower = append(slower, 100*(ns(c1)-ns(cost[0]))/ns(cost[0]))
				drop = append(drop, 100*(mpps(cost[0])-mpps(c1))/mpps(cost[0]))
			}
			cost[side] = c1
		}
		b.StopTimer()
		loss, err := c.Close()
		<-done
		if err != nil {
			return err
		}
		b.ReportMetric(ns(cost[0]), "off-ns/pkt")
		b.ReportMetric(ns(cost[1]), "on-ns/pkt")
		b.ReportMetric(median(slower), "slower-%")
		b.ReportMetric(mpps(cost[0]), "off-Mpps")
		b.ReportMetric(mpps(cost[1]), "on-Mpps")
		b.ReportMetric(median(drop), "rate-drop-%")
		b.ReportMetric(float64(kept), "kept")
		b.ReportMetric(float64(loss.RateCapped), "rate-capped")
		if loss.RateCapped == 0 {
			return errors.New("a capture at line rate refused nothing: the rate cap was not reached")
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// captureLoadRate is BenchmarkCaptureLoad's cap: 'director capture”s
// default, or DIRECTOR_CAPTURE_RATE's.
func captureLoadRate() int {
	if n, err := strconv.Atoi(os.Getenv("DIRECTOR_CAPTURE_RATE")); err == nil {
		return n
	}
	return 5000
}

// historyBenchConfig is two tables alike, of six backends each: TCP to
// 10.72.0.1:80 reads the first, to 10.72.0.2:80 the second, which the
// benchmark gives a history.
var historyBenchConfig = func() string {
	t := func(name, vip, net string) string {
		var bs []string
		for i := 1; i <= 6; i++ {
			bs = append(bs, fmt.Sprintf(`{"ip": "192.168.%s.%d", "state": "active", "healthy": true}`, net, i))
		}
		return `{"name": "` + name + `", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
  "binds": [{"ip": "` + vip + `", "proto": "tcp", "port": 80}], "backends": [` + strings.Join(bs, ", ") + `]}`
	}
	return `{"tables": [` + t("plain", "10.72.0.1", "72") + `, ` + t("hist", "10.72.0.2", "73") + `]}`
}()

// fullHistory is a history of t in which every row but skip lists the
// four backends that are neither its primary nor its secondary (t has six),
// as a table does after four changes of every row's primary in the window.
func fullHistory(t *table.Table, until time.Time, skip int) *table.History {
	h := &table.History{Expires: []int64{until.UnixNano()}, Rows: make([]table.HistRow, table.Rows), Hops: make([]table.HistHops, table.Rows),
		MaxHops: table.HistoryHops}
	order := make([]int, len(t.Backends))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return t.Backends[a].IP.Compare(t.Backends[b].IP) })
	pos := make([]uint16, len(t.Backends))
	for k, i := range order {
		pos[i] = uint16(k + 1)
		h.Backends = append(h.Backends, table.HistBackend{IP: t.Backends[i].IP, Up: true})
	}
	for r, row := range t.Rows {
		if r == skip {
			continue
		}
		k := 0
		for i := range t.Backends {
			if uint32(i) != row.Primary && uint32(i) != row.Secondary && k < table.HistoryHops {
				h.Rows[r][k] = table.HistEntry{Backend: pos[i]}
				h.Hops[r][k] = pos[i]
				k++
			}
		}
	}
	return h
}

// BenchmarkProgramHistory is what a row's earlier primaries cost a
// packet: to a row listing four (the most: eight hops with the alternate
// hash's, here six) against the same packet to a table alike without
// history; and to a row listing none in a table that has a history (it
// reads the row's hops and finds none).
func BenchmarkProgramHistory(b *testing.B) {
	testenv.Kernel(b)
	for _, c := range []struct {
		name string
		skip bool // the packet's row lists none
	}{{"full-chain-vs-none", false}, {"row-without-vs-none", true}} {
		b.Run(c.name, func(b *testing.B) {
			err := testrun.InNetns(func() error {
				dc := directorConfig()
				d, m := setupWith(b, dc, historyBenchConfig)
				base, versus := benchTo("10.72.0.1", 80), benchTo("10.72.0.2", 80)
				skip := -1
				if c.skip {
					skip = m.Process(versus[0]).Row
				}
				tabs := m.Tables
				hists := []*table.History{nil, fullHistory(tabs[1], time.Now().Add(time.Hour), skip)}
				if _, err := d.applyChange(change{Tables: tabs}, func(State) ([]*table.History, error) { return hists, nil }); err != nil {
					return err
				}
				m.Histories = hists
				want := 2 + table.HistoryHops
				if c.skip {
					want = 2
				}
				if r := m.Process(versus[0]); r.NHops != want {
					return fmt.Errorf("the packet lists %d hops, want %d", r.NHops, want)
				}
				if v, out, err := testrun.Run(d.Prog, versus[0]); err != nil || int(v) != model.XDPTX || !bytes.Equal(out, m.Process(versus[0]).Out) {
					return fmt.Errorf("the kernel does not list the history the model does: %v", err)
				}
				return versusOn(b, d, base, versus, "none", "history")
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// TestQUICEncryptedBenchRoutes: the encrypted-ID benchmark's packets are
// routed by their IDs (to the second backend), not sent down a fallback.
func TestQUICEncryptedBenchRoutes(t *testing.T) {
	m := model.New(directorConfig(), pkt.GatewayMAC, testTables(t, quicEncryptedBenchConfig))
	for i, q := range quicEncryptedBench {
		r := m.Process(benchUDP4(q.vip, 443, benchQUICEncrypted(i)))
		if r.QUIC != model.QUICRouted || len(r.HopList) == 0 || r.HopList[0] != netip.MustParseAddr("192.168.72.2") {
			t.Errorf("%s: %s, hops %v", q.name, CounterNames()[r.QUIC], r.HopList)
		}
	}
}
