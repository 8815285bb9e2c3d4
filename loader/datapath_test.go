package loader

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/table/bindmap"
	"github.com/director/director/table/config"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/loader/xdpbuild"
	"github.com/director/director/table"
)

// testConfig has several tables, IPv4 and IPv6 VIPs, prefixes, port ranges
// and a more specific bind of one table inside another's prefix.
const testConfig = `{"tables": [
 {"name": "web", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
  "binds": [{"ip": "10.20.0.1", "proto": "tcp", "port": 80}, {"ip": "10.20.0.1", "proto": "tcp", "port": 443},
            {"ip": "fd00:20::1", "proto": "tcp", "port": 443}, {"ip": "10.20.0.0/24", "proto": "udp", "port_start": 1000, "port_end": 2000}],
  "backends": [{"ip": "192.168.10.1", "state": "active", "healthy": true}, {"ip": "192.168.10.2", "state": "active", "healthy": true},
               {"ip": "192.168.10.3", "state": "draining", "healthy": true}, {"ip": "192.168.10.4", "state": "active", "healthy": true},
               {"ip": "192.168.10.5", "state": "filling", "healthy": true}, {"ip": "192.168.10.6", "state": "active", "healthy": true}]},
 {"name": "dns", "hash_key": "ffeeddccbbaa99887766554433221100", "seed": "00000000000000000000000000000001",
  "binds": [{"ip": "10.30.0.0/16", "proto": "udp", "port": 53}, {"ip": "10.30.0.0/16", "proto": "tcp", "port": 53}],
  "backends": [{"ip": "192.168.20.1", "state": "active", "healthy": true}, {"ip": "192.168.20.2", "state": "active", "healthy": false},
               {"ip": "192.168.20.3", "state": "active", "healthy": true}, {"ip": "192.168.20.4", "state": "active", "healthy": true}]},
 {"name": "special", "hash_key": "0123456789abcdef0123456789abcdef", "seed": "fedcba9876543210fedcba9876543210",
  "binds": [{"ip": "10.30.5.5", "proto": "tcp", "port_start": 1, "port_end": 65535}],
  "backends": [{"ip": "192.168.30.1", "state": "active", "healthy": true}, {"ip": "192.168.30.2", "state": "active", "healthy": true}]},
 {"name": "v6", "hash_key": "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf", "seed": "b0b1b2b3b4b5b6b7b8b9babbbcbdbebf",
  "binds": [{"ip": "fd00:30::/64", "proto": "tcp", "port_start": 8000, "port_end": 8999}, {"ip": "fd00:30::/64", "proto": "udp", "port": 53}],
  "backends": [{"ip": "192.168.40.1", "state": "active", "healthy": true}, {"ip": "192.168.40.2", "state": "active", "healthy": true},
               {"ip": "192.168.40.3", "state": "active", "healthy": true}]}
]}`

// underlay6Config is testConfig with the dns and v6 tables' backends IPv6:
// their GUE goes over IPv6 (encapsulate6), the others' over IPv4.
var underlay6Config = strings.NewReplacer(
	`"192.168.20.`, `"fd00:50::2:`, `"192.168.40.`, `"fd00:50::4:`).Replace(testConfig)

// underlay6 adds the IPv6 underlay's source and its own gateway MAC.
func underlay6(dc *table.DirectorConfig) {
	dc.SrcIP6 = netip.MustParseAddr("2001:db8::1")
	dc.GatewayMAC6 = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x66}
}

// testTables builds a config; a bad one is a bug in the test itself.
func testTables(_ testing.TB, cfg string) []*table.Table {
	c, err := config.Parse([]byte(cfg))
	if err != nil {
		panic(err)
	}
	tabs, err := table.BuildAll(c)
	if err != nil {
		panic(err)
	}
	return tabs
}

// setup loads a private director with the test tables and config and the
// model of the same.
func setup(t testing.TB, dc table.DirectorConfig) (*Director, *model.Datapath) {
	t.Helper()
	return setupWith(t, dc, testConfig)
}

// setupWith is setup with the tables of cfg.
func setupWith(t testing.TB, dc table.DirectorConfig, cfg string) (*Director, *model.Datapath) {
	t.Helper()
	return setupSpelling(t, dc, cfg, true)
}

// setupSpelling is setupWith, prefix and range binds spelled out into the
// exact table (as a director runs) or not (for tests of the group path).
func setupSpelling(t testing.TB, dc table.DirectorConfig, cfg string, spell bool) (*Director, *model.Datapath) {
	t.Helper()
	d, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	d.noSpelling = !spell
	t.Cleanup(func() { d.Close() })
	testenv.Hold(t, d.Prog)
	tabs := testTables(t, cfg)
	if err := d.SetConfig(&dc, net.HardwareAddr(pkt.GatewayMAC[:])); err != nil {
		t.Fatal(err)
	}
	if _, err := d.apply(tabs, nil); err != nil {
		t.Fatal(err)
	}
	return d, model.New(dc, pkt.GatewayMAC, tabs)
}

// loadServingTest loads a director into dir serving the test config's
// tables and director config, for tests that attach it, and the model of
// the same.
func loadServingTest(dir string) (*Director, *model.Datapath, error) {
	dc := directorConfig()
	tabs := testTables(nil, testConfig)
	d, err := Load(dir)
	if err != nil {
		return nil, nil, err
	}
	if _, err := d.applyChange(change{Tables: tabs, Config: &dc}, nil); err != nil {
		d.Close()
		return nil, nil, err
	}
	return d, model.New(dc, pkt.GatewayMAC, tabs), nil
}

func directorConfig() table.DirectorConfig {
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	dc.GatewayMAC = net.HardwareAddr(pkt.GatewayMAC[:])
	return dc
}

// gen makes varied frames: steered and not, every header shape the parser
// handles, and broken ones; and, given tables with QUIC-LB routing, QUIC
// packets to them (quicFrame).
type gen struct {
	rng  *rand.Rand
	quic []*table.Table
}

var (
	vips4 = []string{"10.20.0.1", "10.20.0.7", "10.30.1.2", "10.30.5.5", "10.40.0.1"}
	vips6 = []string{"fd00:20::1", "fd00:30::5", "fd00:30::abcd", "fd00:31::1"}
	ports = []uint16{53, 80, 443, 1000, 1500, 2000, 2001, 8000, 8500, 9000, 22}
)

func (g *gen) pick(s []string) netip.Addr { return netip.MustParseAddr(s[g.rng.IntN(len(s))]) }

func (g *gen) client(v6 bool) netip.Addr {
	if v6 {
		var a [16]byte
		a[0], a[1] = 0x20, 0x01
		for i := 2; i < 16; i++ {
			a[i] = byte(g.rng.Uint32())
		}
		return netip.AddrFrom16(a)
	}
	return netip.AddrFrom4([4]byte{byte(1 + g.rng.IntN(223)), byte(g.rng.Uint32()), byte(g.rng.Uint32()), byte(g.rng.Uint32())})
}

func (g *gen) port() uint16 {
	if g.rng.IntN(4) == 0 {
		return uint16(g.rng.Uint32())
	}
	return ports[g.rng.IntN(len(ports))]
}

func (g *gen) l4(proto uint8) []byte {
	payload := make([]byte, g.rng.IntN(64))
	if proto == 6 {
		return pkt.TCP(uint16(1024+g.rng.IntN(60000)), g.port(), 0x10, payload)
	}
	return pkt.UDP(uint16(1024+g.rng.IntN(60000)), g.port(), payload)
}

// steered are destinations that binds match, so that a good share of the
// generated traffic takes the encapsulation path.
var steered = []struct {
	vip   string
	proto uint8
	port  uint16
}{
	{"10.20.0.1", 6, 80}, {"10.20.0.1", 6, 443}, {"10.20.0.9", 17, 1500}, {"fd00:20::1", 6, 443},
	{"10.30.7.7", 17, 53}, {"10.30.7.7", 6, 53}, {"10.30.5.5", 6, 53}, {"10.30.5.5", 6, 9999},
	{"fd00:30::1234", 6, 8123}, {"fd00:30::9", 17, 53},
}

// steeredIP is a TCP or UDP packet that a bind matches.
func (g *gen) steeredIP() []byte {
	s := steered[g.rng.IntN(len(steered))]
	vip := netip.MustParseAddr(s.vip)
	payload := make([]byte, g.rng.IntN(200))
	var o pkt.V4Opts
	if g.rng.IntN(6) == 0 { // near and over the links' MTUs, with DF or not
		payload = make([]byte, 1150+g.rng.IntN(400))
		o.FragOff = []uint16{0x4000, 0}[g.rng.IntN(2)]
	}
	var l4 []byte
	if s.proto == 6 {
		l4 = pkt.TCP(uint16(1024+g.rng.IntN(60000)), s.port, 0x10, payload)
	} else {
		l4 = pkt.UDP(uint16(1024+g.rng.IntN(60000)), s.port, payload)
	}
	if vip.Is6() {
		return pkt.IPv6(g.client(true), vip, s.proto, l4)
	}
	return pkt.IPv4(g.client(false), vip, s.proto, l4, o)
}

// bigError is an ICMP error as large as a router sends one (1,280 bytes
// for ICMPv6, 576 for ICMP, here up to 1,400), quoting a flow from a VIP,
// with DF.
func (g *gen) bigError(v6 bool, client netip.Addr, proto uint8) []byte {
	pad := make([]byte, 1000+g.rng.IntN(300))
	if v6 {
		quoted := pkt.IPv6(g.pick(vips6), client, proto, append(g.l4(proto), pad...))
		return pkt.IPv6(netip.MustParseAddr("2001:db8::1"), g.pick(vips6), 58, pkt.ICMP(2, 0, 1280, quoted))
	}
	quoted := pkt.IPv4(g.pick(vips4), client, proto, append(g.l4(proto), pad...), pkt.V4Opts{})
	return pkt.IPv4(netip.MustParseAddr("198.51.100.1"), g.pick(vips4), 1, pkt.ICMP(3, 4, 1400, quoted), pkt.V4Opts{FragOff: 0x4000})
}

func (g *gen) frame() []byte {
	if g.quic != nil && g.rng.IntN(5) < 2 {
		return g.quicFrame(g.quic)
	}
	v6 := g.rng.IntN(3) == 0
	var ip []byte
	proto := []uint8{6, 17}[g.rng.IntN(2)]
	switch kind := g.rng.IntN(20); {
	case kind < 6: // traffic for the services
		ip = g.steeredIP()
	case kind < 10: // plain TCP/UDP, to VIPs and elsewhere
		if v6 {
			ip = pkt.IPv6(g.client(true), g.pick(vips6), proto, g.l4(proto))
		} else {
			ip = pkt.IPv4(g.client(false), g.pick(vips4), proto, g.l4(proto), pkt.V4Opts{})
		}
	case kind == 10: // IPv4 options
		opts := bytes.Repeat([]byte{1}, 4*(1+g.rng.IntN(10))) // NOPs
		ip = pkt.IPv4(g.client(false), g.pick(vips4), proto, g.l4(proto), pkt.V4Opts{Options: opts})
	case kind == 11: // fragments
		if v6 {
			ip = pkt.IPv6(g.client(true), g.pick(vips6), proto, g.l4(proto), pkt.Ext{Type: 44, Body: make([]byte, 6)})
		} else {
			ip = pkt.IPv4(g.client(false), g.pick(vips4), proto, g.l4(proto), pkt.V4Opts{FragOff: []uint16{0x2000, 0x0010, 0x2100}[g.rng.IntN(3)]})
		}
	case kind == 12: // IPv6 extension headers, up to one too many
		var exts []pkt.Ext
		for i := 0; i < 1+g.rng.IntN(5); i++ {
			exts = append(exts, pkt.Ext{Type: []uint8{0, 43, 60}[g.rng.IntN(3)], Body: make([]byte, g.rng.IntN(20))})
		}
		ip = pkt.IPv6(g.client(true), g.pick(vips6), proto, g.l4(proto), exts...)
	case kind == 13 || kind == 14: // ICMP errors quoting a flow from a VIP
		client := g.client(v6)
		if g.rng.IntN(4) == 0 { // large ones, which the link's MTU may not take either
			ip = g.bigError(v6, client, proto)
		} else if v6 {
			quoted := pkt.IPv6(g.pick(vips6), client, proto, g.l4(proto))
			ip = pkt.IPv6(netip.MustParseAddr("2001:db8::1"), g.pick(vips6), 58, pkt.ICMP(2, 0, 1280, quoted[:48+g.rng.IntN(len(quoted)-47)]))
		} else {
			quoted := pkt.IPv4(g.pick(vips4), client, proto, g.l4(proto), pkt.V4Opts{})
			code := []uint8{4, 3, 1}[g.rng.IntN(3)]
			ip = pkt.IPv4(netip.MustParseAddr("198.51.100.1"), g.pick(vips4), 1, pkt.ICMP(3, code, 1400, quoted[:24+g.rng.IntN(len(quoted)-23)]), pkt.V4Opts{})
		}
	case kind == 15: // echo requests and other ICMP
		typ := []uint8{8, 0, 11, 5}[g.rng.IntN(4)]
		if v6 {
			typ = []uint8{128, 129, 1, 3}[g.rng.IntN(4)]
			ip = pkt.IPv6(g.client(true), g.pick(vips6), 58, pkt.ICMP(typ, 0, 0x00010001, make([]byte, g.rng.IntN(32))))
		} else {
			ip = pkt.IPv4(g.client(false), g.pick(vips4), 1, pkt.ICMP(typ, 0, 0x00010001, make([]byte, g.rng.IntN(32))), pkt.V4Opts{})
		}
	case kind == 16: // other protocols
		if v6 {
			ip = pkt.IPv6(g.client(true), g.pick(vips6), 47, make([]byte, 20))
		} else {
			ip = pkt.IPv4(g.client(false), g.pick(vips4), 50, make([]byte, 20), pkt.V4Opts{})
		}
	case kind == 17: // non-IP
		return pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 0, 0x0806, make([]byte, 28))
	default:
		ip = pkt.IPv4(g.client(false), g.pick(vips4), proto, g.l4(proto), pkt.V4Opts{})
	}
	vlan := 0
	if g.rng.IntN(8) == 0 {
		vlan = 1 + g.rng.IntN(4094)
	}
	f := pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, vlan, pkt.EtherType(ip), ip)
	switch g.rng.IntN(30) {
	case 0: // Ethernet padding after the IP packet
		f = append(f, make([]byte, 1+g.rng.IntN(20))...)
	case 1: // QinQ
		f = pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 0, 0x88a8, append([]byte{0, 5, 0x81, 0}, f[12:]...))
	case 2: // a random byte corrupted
		f[g.rng.IntN(len(f))] = byte(g.rng.Uint32())
	case 3: // truncated
		f = f[:g.rng.IntN(len(f)+1)]
	}
	return f
}

type exactKeyT struct {
	proto uint8
	addr  netip.Addr
	port  uint16
}

type tally struct {
	exact          map[exactKeyT]bool // binds the fast path holds
	trie           bool               // the trie, not the group path, finds the rest
	counters       [abi.NumCounters]uint64
	tablePackets   map[int]uint64
	backendPackets map[string]uint64
	// quic is, per table, its QUIC counters by the config of the IDs
	// read ("none" where none was), as `stats` gives them.
	quic map[int]map[string]map[string]uint64
	glb  [3]uint64 // the kernel's GLB counters after the last passed frame
}

// glbCounters are the counters of what GLB would have made of a passed
// frame, in abi.CGLBUnknownFormat's order.
var glbCounters = []int{abi.CGLBUnknownFormat, abi.CGLBNoMatching, abi.CGLBMatched}

// glbOf is which of the kernel's GLB counters moved since the last look
// (-1: none, or more than one), checked for every passed frame: the
// totals alone would let two wrong answers cancel.
func glbOf(d *Director, tl *tally) (int, error) {
	g, err := d.GlobalCounters()
	if err != nil {
		return 0, err
	}
	moved := -1
	for i, c := range glbCounters {
		if g[c] != tl.glb[i] {
			if moved != -1 || g[c] != tl.glb[i]+1 {
				moved = -2
			} else if moved == -1 {
				moved = c
			}
			tl.glb[i] = g[c]
		}
	}
	if moved == -2 {
		moved = -1
	}
	return moved, nil
}

// compare runs frame through kernel and model; it returns a description of
// any difference.
func compare(d *Director, m *model.Datapath, frame []byte, tl *tally) string {
	want := m.Process(frame)
	if len(frame) < 14 {
		return "" // BPF_PROG_RUN refuses these; no NIC delivers them either
	}
	verdict, out, err := testrun.Run(d.Prog, frame)
	if err != nil {
		return err.Error()
	}
	tl.counters[abi.CProcessed]++
	if (want.Verdict == model.XDPTX || want.Reason == abi.CPassNoBind || want.Reason == abi.CPassICMPEchoOff) &&
		tl.exact[exactKeyT{want.Proto, want.VIP, want.VIPPort}] {
		tl.counters[abi.CBindFast]++
	} else if !tl.trie && (want.Verdict == model.XDPTX || want.Reason == abi.CPassICMPEchoOff) {
		// Every test config fits the group path: it finds what the
		// exact table does not.
		tl.counters[abi.CBindGroup]++
	}
	if want.Verdict == model.XDPTX {
		tl.counters[abi.CMatched]++
		if want.QUIC != 0 {
			tl.counters[want.QUIC]++
		}
		if want.QUIC == model.QUICRouted && want.QUICICMP {
			tl.counters[model.QUICICMPRouted]++
		}
		if want.QUIC != 0 {
			tl.countQUIC(want.Table, want.QUICConfig, want.QUIC)
			if want.QUIC == model.QUICRouted && want.QUICICMP {
				tl.countQUIC(want.Table, want.QUICConfig, model.QUICICMPRouted)
			}
		}
		if want.TooBig != 0 {
			tl.counters[want.TooBig]++
		}
		if want.TooBig != abi.CICMPTooBig { // a reply goes to no backend
			tl.counters[abi.CEncapsulated]++
			tl.counters[abi.CEncapBytes] += uint64(want.OuterLen)
			tl.tablePackets[want.Table]++
			tl.backendPackets[want.HopList[0].String()]++
		}
	} else {
		tl.counters[want.Reason]++
		if want.GLB != 0 {
			tl.counters[want.GLB]++
		}
		got, err := glbOf(d, tl)
		if err != nil {
			return err.Error()
		}
		if got != want.GLB {
			names := CounterNames()
			name := func(c int) string {
				if c <= 0 {
					return "none"
				}
				return names[c]
			}
			return fmt.Sprintf("passed (%s); GLB's result: kernel %s, model %s", names[want.Reason], name(got), name(want.GLB))
		}
	}
	if int(verdict) != want.Verdict {
		return fmt.Sprintf("verdict %d, model %d (reason %d)", verdict, want.Verdict, want.Reason)
	}
	if !bytes.Equal(out, want.Out) {
		return fmt.Sprintf("output differs:\n kernel %s\n model  %s", hex.EncodeToString(out), hex.EncodeToString(want.Out))
	}
	return ""
}

// useBuild makes the private directors t loads be build b's, until t ends.
func useBuild(t testing.TB, b xdpbuild.Build) {
	orig := directorSpec
	directorSpec = func() (*ebpf.CollectionSpec, error) { return xdpbuild.DirectorOf(b) }
	t.Cleanup(func() { directorSpec = orig })
}

// TestDatapathMatchesModel runs every build this kernel loads (both on
// one with multi-buffer XDP): each equals the model byte for byte, so the
// builds send the same bytes for every frame.
func TestDatapathMatchesModel(t *testing.T) {
	testenv.Kernel(t)
	for _, b := range xdpbuild.Runnable() {
		t.Run(string(b), func(t *testing.T) {
			useBuild(t, b)
			// The single-buffer build on a kernel that runs the other:
			// a quarter of the packets, its difference being small.
			div := 1
			if cur, _ := xdpbuild.Current(); b != cur {
				div = 4
			}
			datapathMatchesModel(t, b, div)
		})
	}
}

func datapathMatchesModel(t *testing.T, build xdpbuild.Build, div int) {
	type tcase struct {
		name string
		edit func(*table.DirectorConfig)
		n    int
		trie bool   // the group path is turned off: the trie answers, and hashes start from the table's key
		cfg  string // the tables: testConfig when empty
		// linkMTU, for the single-buffer build: the MTU link_mtus gives
		// the interface BPF_PROG_RUN runs on (lo), for the model as
		// outbound_mtu.
		linkMTU uint32
		history bool // changes made first, so that rows list earlier primaries
	}
	var extra []tcase
	if build == xdpbuild.SingleBuffer {
		extra = append(extra, tcase{name: "link-mtu", edit: func(*table.DirectorConfig) {}, n: 20000, linkMTU: 1400})
	}
	for _, c := range append([]tcase{
		{"default", func(*table.DirectorConfig) {}, 100000, false, "", 0, false},
		{"trie", func(*table.DirectorConfig) {}, 20000, true, "", 0, false},
		{"all-fields", func(dc *table.DirectorConfig) {
			dc.HashFields = table.HashSrcAddr | table.HashDstAddr | table.HashSrcPort | table.HashDstPort
		}, 10000, false, "", 0, false},
		{"alt-hash", func(dc *table.DirectorConfig) {
			dc.AltHashFields = table.HashSrcAddr | table.HashSrcPort
		}, 10000, false, "", 0, false},
		{"ports-only-echo-off", func(dc *table.DirectorConfig) {
			dc.HashFields = table.HashDstPort | table.HashSrcPort
			dc.ForwardICMPEcho = false
		}, 10000, false, "", 0, false},
		{"ipv6-underlay", underlay6, 20000, false, underlay6Config, 0, false},
		{"ipv6-underlay-alt-hash", func(dc *table.DirectorConfig) {
			underlay6(dc)
			dc.AltHashFields = table.HashSrcAddr | table.HashSrcPort
		}, 10000, false, underlay6Config, 0, false},
		// Packets their encapsulation takes over the link's MTU: the
		// generator's large ones, with DF and without, and ICMP errors.
		{"outbound-mtu", func(dc *table.DirectorConfig) { dc.OutboundMTU = 1400 }, 20000, false, "", 0, false},
		{"ipv6-underlay-outbound-mtu-alt-hash", func(dc *table.DirectorConfig) {
			underlay6(dc)
			dc.AltHashFields = table.HashSrcAddr | table.HashSrcPort
			dc.OutboundMTU = 1320
		}, 10000, false, underlay6Config, 0, false},
		// QUIC-LB routing: QUIC packets of every kind among the rest.
		{"quic", func(*table.DirectorConfig) {}, 40000, false, quicConfig, 0, false},
		{"quic-all-fields-outbound-mtu", func(dc *table.DirectorConfig) {
			dc.HashFields = table.HashSrcAddr | table.HashDstAddr | table.HashSrcPort | table.HashDstPort
			dc.OutboundMTU = 1400
		}, 10000, false, quicConfig, 0, false},
		{"quic-encrypted", func(*table.DirectorConfig) {}, 40000, false, quicEncryptedConfig, 0, false},
		{"quic-rotation", func(*table.DirectorConfig) {}, 40000, false, quicRotationConfig, 0, false},
		{"quic-ipv6-underlay-alt-hash", func(dc *table.DirectorConfig) {
			underlay6(dc)
			dc.AltHashFields = table.HashSrcAddr | table.HashSrcPort
		}, 20000, false, quicUnderlay6Config, 0, false},
		// Rows that list earlier primaries, up to the most a row holds,
		// removed backends among them.
		{name: "history", edit: func(*table.DirectorConfig) {}, n: 40000, history: true},
		{name: "history-alt-hash-outbound-mtu", edit: func(dc *table.DirectorConfig) {
			dc.AltHashFields = table.HashSrcAddr | table.HashSrcPort
			dc.OutboundMTU = 1400
		}, n: 20000, history: true},
		{name: "history-ipv6-underlay-alt-hash", edit: func(dc *table.DirectorConfig) {
			underlay6(dc)
			dc.AltHashFields = table.HashSrcAddr | table.HashSrcPort
		}, n: 20000, cfg: underlay6Config, history: true},
		{name: "history-quic", edit: func(*table.DirectorConfig) {}, n: 20000, cfg: quicConfig, history: true},
	}, extra...) {
		t.Run(c.name, func(t *testing.T) {
			n := testenv.Reduced(c.n / div)
			if testing.Short() {
				n /= 10
			}
			dc := directorConfig()
			c.edit(&dc)
			cfg := c.cfg
			if cfg == "" {
				cfg = testConfig
			}
			d, m := setupWith(t, dc, cfg)
			if c.history {
				m = makeHistory(t, d, dc, cfg)
			}
			if c.linkMTU != 0 {
				if err := d.Maps.LinkMtus.Put(uint32(1), c.linkMTU); err != nil {
					t.Fatal(err)
				}
				mdc := dc
				mdc.OutboundMTU = int(c.linkMTU)
				hists := m.Histories
				m = model.New(mdc, pkt.GatewayMAC, m.Tables)
				m.Histories = hists
			}
			g := &gen{rng: rand.New(rand.NewPCG(uint64(n), 99))}
			quic := false
			for _, t := range m.Tables {
				quic = quic || t.QUIC.On()
			}
			if quic {
				g.quic = m.Tables
			}
			tl := &tally{tablePackets: map[int]uint64{}, backendPackets: map[string]uint64{}, exact: exactSet(m.Tables), trie: c.trie}
			if c.trie {
				for gen := uint32(0); gen < 2; gen++ {
					var gt abi.GroupTable
					if err := d.Maps.BindGroups.Lookup(gen, &gt); err != nil {
						t.Fatal(err)
					}
					gt.Nlens = [2]uint8{bindmap.GroupTrie, bindmap.GroupTrie}
					if err := d.Maps.BindGroups.Put(gen, &gt); err != nil {
						t.Fatal(err)
					}
				}
			}
			failures := 0
			run := func(i int, f []byte) {
				if diff := compare(d, m, f, tl); diff != "" {
					failures++
					if failures <= 5 {
						t.Errorf("packet %d (%s): %s", i, hex.EncodeToString(f), diff)
					}
				}
			}
			listed := 0 // with history: packets that listed an earlier primary
			for i := 0; i < n; i++ {
				f := g.frame()
				run(i, f)
				if c.history {
					if r := m.Classify(f); r.Verdict == model.XDPTX && r.NHops > 2+2*min(1, int(dc.AltHashFields)) {
						listed++
					}
				}
				if i%500 == 0 { // every truncation of some frames
					for l := 0; l < len(f); l++ {
						run(i, f[:l])
					}
				}
			}
			if failures > 0 {
				t.Fatalf("%d of the packets differ", failures)
			}
			if c.history && listed < n/20 {
				t.Fatalf("only %d of %d packets listed an earlier primary", listed, n)
			}
			checkCounters(t, d, tl)
			for _, q := range quicCounters {
				if quic && tl.counters[q] == 0 {
					t.Errorf("no packet was counted as %s: the generator misses a QUIC case", CounterNames()[q])
				}
			}
			if dc.OutboundMTU != 0 || c.linkMTU != 0 {
				replied, encapsulated := tl.counters[abi.CICMPTooBig], tl.counters[abi.CTooBigEncap]
				t.Logf("too big for the link: %d answered, %d encapsulated all the same", replied, encapsulated)
				if replied == 0 || encapsulated == 0 {
					t.Error("the generator's traffic does not take both too-big paths")
				}
			}
		})
	}
}

func checkCounters(t *testing.T, d *Director, tl *tally) {
	t.Helper()
	got, err := d.GlobalCounters()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < abi.NumCounters; i++ {
		if got[i] != tl.counters[i] {
			t.Errorf("counter %s = %d, model %d", CounterNames()[i], got[i], tl.counters[i])
		}
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for i, ts := range st.Tables {
		if ts.Traffic.Packets != tl.tablePackets[i] {
			t.Errorf("table %s: %d packets, model %d", ts.Name, ts.Traffic.Packets, tl.tablePackets[i])
		}
		for _, b := range ts.Backends {
			if b.Packets != tl.backendPackets[b.IP] {
				t.Errorf("backend %s: %d packets, model %d", b.IP, b.Packets, tl.backendPackets[b.IP])
			}
		}
		kernel := map[string]map[string]uint64{}
		for _, q := range ts.QUIC {
			if len(q.Counters) > 0 {
				kernel[quicConfigName(q.ConfigID)] = q.Counters
			}
		}
		if want := tl.quic[i]; fmt.Sprint(kernel) != fmt.Sprint(want) && (len(kernel) > 0 || len(want) > 0) {
			t.Errorf("table %s's QUIC counters by config: %v, model %v", ts.Name, kernel, want)
		}
	}
	t.Logf("counters: %v", got)
}

func (tl *tally) countQUIC(table, config, counter int) {
	if tl.quic == nil {
		tl.quic = map[int]map[string]map[string]uint64{}
	}
	if tl.quic[table] == nil {
		tl.quic[table] = map[string]map[string]uint64{}
	}
	id := uint8(config)
	name := quicConfigName(&id)
	if config == model.QUICNoID {
		name = quicConfigName(nil)
	}
	if tl.quic[table][name] == nil {
		tl.quic[table][name] = map[string]uint64{}
	}
	tl.quic[table][name][CounterNames()[counter]]++
}

func quicConfigName(id *uint8) string {
	if id == nil {
		return "none"
	}
	return fmt.Sprint(*id)
}

func rngFor(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// clientOf returns the source address of an untagged IPv4 or IPv6 frame.
func clientOf(f []byte) netip.Addr {
	if f[12] == 0x86 {
		return netip.AddrFrom16([16]byte(f[14+8 : 14+24]))
	}
	return netip.AddrFrom4([4]byte(f[14+12 : 14+16]))
}

// flowHashOf is the default flow hash: the client address.
func flowHashOf(t *table.Table, client netip.Addr) uint64 {
	return table.FlowHash(t.HashKey, table.AddrBytes(client))
}

// exactSet lists the (protocol, address, port) keys of the exact fast path.
func exactSet(tabs []*table.Table) map[exactKeyT]bool {
	refs := table.Refs(tabs)
	out := map[exactKeyT]bool{}
	for _, e := range bindmap.Compile(refs) {
		if bindmap.InExactTable(e) {
			out[exactKeyT{uint8(e.Proto), e.Prefix.Addr(), e.Port}] = true
		}
	}
	return out
}

// makeHistory makes changes to cfg's tables in d, a few seconds apart by
// d's clock, until some rows list as many earlier primaries as a row
// holds: a drain, weights raised and lowered, a removal without a drain
// (the removed backend stays in the chains), a backend added. It checks
// that what the kernel holds reads back as the history the change's plan
// worked out, and returns the model of the result.
func makeHistory(t *testing.T, d *Director, dc table.DirectorConfig, cfg string) *model.Datapath {
	t.Helper()
	c, err := config.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_900_000_000, 0)
	d.Clock = func() time.Time { return now }
	defer func() { d.Clock = nil }()
	rng := rand.New(rand.NewPCG(45, 45))
	var tabs []*table.Table
	var want []*table.History
	// Twenty steps, or ten where the machine is slow (an emulated guest):
	// each is a build, a plan and an apply of every table.
	for step := range max(10, testenv.Reduced(20)) {
		now = now.Add(3 * time.Second)
		for i := range c.Tables {
			tc := &c.Tables[i]
			bs := slices.Clone(tc.Backends)
			switch k := rng.IntN(len(bs)); {
			case step == 0:
				bs[k].State = table.StateDraining
			case step == 5 && len(bs) > 2:
				bs = slices.Delete(bs, k, k+1) // removed without a drain
			case step == 8 || step == 9:
				ip := bs[len(bs)-1].IP
				for slices.ContainsFunc(bs, func(b table.Backend) bool { return b.IP == ip }) {
					ip = ip.Next()
				}
				bs = append(bs, table.Backend{IP: ip, State: table.StateActive, Healthy: true, ServerID: table.ServerID(strings.Repeat(string([]byte{byte(0xa0 + step)}), len(bs[0].ServerID)))})
			default: // one weight up, another down, so that ten steps fill a row's hops
				j := (k + 1 + rng.IntN(len(bs)-1)) % len(bs)
				bs[k].State, bs[j].State = table.StateActive, table.StateActive
				bs[k].Weight = uint16(2000 + rng.IntN(3000))
				bs[j].Weight = uint16(1 + rng.IntN(200))
			}
			tc.Backends = bs
		}
		if tabs, err = table.BuildAll(c); err != nil {
			t.Fatal(err)
		}
		live, err := d.LiveState()
		if err != nil {
			t.Fatal(err)
		}
		plan, err := d.PlanOn(live, &Proposal{Tables: tabs})
		if err != nil {
			t.Fatal(err)
		}
		// With history in the packets, a row is at risk only for want of
		// room: more earlier primaries than its hops hold.
		for _, td := range plan.Diff.Tables {
			if td.Rows.AtRisk != td.History.Overflow {
				t.Fatalf("step %d: %d rows at risk, %d of them for want of room: %v", step, td.Rows.AtRisk, td.History.Overflow, plan.Reasons)
			}
		}
		want = plan.Histories
		if _, err := d.apply(tabs, nil); err != nil {
			t.Fatal(err)
		}
	}
	live, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	for i, lt := range live {
		if !lt.History.Equal(want[i]) {
			t.Fatalf("table %d: the history read back is not the one the plan worked out", i)
		}
		if lt.History != nil {
			most = max(most, lt.History.MaxHops)
		}
	}
	if most < table.HistoryHops {
		t.Fatalf("the changes left at most %d earlier primaries in a row, not %d", most, table.HistoryHops)
	}
	m := model.New(dc, pkt.GatewayMAC, Tables(live))
	m.Histories = Histories(live)
	return m
}
