package loader

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/lab/golden"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/table"
)

type goldenCase struct {
	name  string
	frame []byte
}

func a(s string) netip.Addr { return netip.MustParseAddr(s) }

func pf(s string) netip.Prefix { return netip.MustParsePrefix(s) }

var client4, client6 = a("203.0.113.7"), a("2001:db8:1::7")

func goldenCases() []goldenCase {
	tcp := pkt.TCP(40000, 80, 0x02, nil)
	web := pkt.IPv4(client4, a("10.20.0.1"), 6, tcp, pkt.V4Opts{})
	webReply := pkt.IPv4(a("10.20.0.1"), client4, 6, pkt.TCP(80, 40000, 0x12, nil), pkt.V4Opts{})
	v6 := pkt.IPv6(client6, a("fd00:20::1"), 6, pkt.TCP(40001, 443, 0x02, nil))
	v6Reply := pkt.IPv6(a("fd00:20::1"), client6, 6, pkt.TCP(443, 40001, 0x12, []byte("data")))
	eth := pkt.Frame
	return []goldenCase{
		{"ipv4-tcp-syn", eth(web)},
		{"ipv4-udp-port-range", eth(pkt.IPv4(client4, a("10.20.0.9"), 17, pkt.UDP(5353, 1500, []byte("hello")), pkt.V4Opts{}))},
		{"ipv6-tcp", eth(v6)},
		{"ipv4-vlan", pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 42, 0x0800, web)},
		{"ipv4-options", eth(pkt.IPv4(client4, a("10.20.0.1"), 6, tcp, pkt.V4Opts{Options: []byte{1, 1, 1, 0}}))},
		{"ipv4-more-specific-bind", eth(pkt.IPv4(client4, a("10.30.5.5"), 6, pkt.TCP(40000, 53, 0x02, nil), pkt.V4Opts{}))},
		{"ipv4-prefix-bind", eth(pkt.IPv4(client4, a("10.30.9.9"), 17, pkt.UDP(40000, 53, nil), pkt.V4Opts{}))},
		{"icmp-frag-needed", eth(pkt.IPv4(a("198.51.100.1"), a("10.20.0.1"), 1, pkt.ICMP(3, 4, 1400, webReply), pkt.V4Opts{}))},
		{"icmpv6-packet-too-big", eth(pkt.IPv6(a("2001:db8::1"), a("fd00:20::1"), 58, pkt.ICMP(2, 0, 1280, v6Reply)))},
		{"icmp-echo", eth(pkt.IPv4(client4, a("10.20.0.1"), 1, pkt.ICMP(8, 0, 0x00010001, []byte("ping")), pkt.V4Opts{}))},
		{"icmpv6-echo", eth(pkt.IPv6(client6, a("fd00:30::1"), 58, pkt.ICMP(128, 0, 0x00010001, []byte("ping"))))},
		{"ipv6-hop-by-hop", eth(pkt.IPv6(client6, a("fd00:20::1"), 6, pkt.TCP(40001, 443, 0x02, nil), pkt.Ext{Type: 0, Body: make([]byte, 6)}))},
		{"ethernet-padding", append(eth(pkt.IPv4(client4, a("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x10, nil), pkt.V4Opts{})), 0, 0, 0, 0, 0, 0)},
		{"pass-ipv4-fragment", eth(pkt.IPv4(client4, a("10.20.0.1"), 6, tcp, pkt.V4Opts{FragOff: 0x2000}))},
		{"pass-ipv6-fragment", eth(pkt.IPv6(client6, a("fd00:20::1"), 6, tcp, pkt.Ext{Type: 44, Body: make([]byte, 6)}))},
		{"pass-ipv6-too-many-ext", eth(pkt.IPv6(client6, a("fd00:20::1"), 6, tcp, pkt.Ext{Type: 0}, pkt.Ext{Type: 60}, pkt.Ext{Type: 60}, pkt.Ext{Type: 43}, pkt.Ext{Type: 60}))},
		{"pass-no-bind-port", eth(pkt.IPv4(client4, a("10.20.0.1"), 6, pkt.TCP(40000, 8080, 0x02, nil), pkt.V4Opts{}))},
		{"pass-no-bind-addr", eth(pkt.IPv4(client4, a("10.99.0.1"), 6, tcp, pkt.V4Opts{}))},
		{"pass-icmp-other", eth(pkt.IPv4(client4, a("10.20.0.1"), 1, pkt.ICMP(11, 0, 0, webReply), pkt.V4Opts{}))},
		{"pass-gre", eth(pkt.IPv4(client4, a("10.20.0.1"), 47, make([]byte, 8), pkt.V4Opts{}))},
		{"pass-arp", pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 0, 0x0806, make([]byte, 28))},
		{"pass-qinq", pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 0, 0x88a8, append([]byte{0, 5, 0x81, 0, 0, 7, 8, 0}, web...))},
		{"pass-truncated-tcp", eth(web[:30])},
		{"pass-bad-total-length", eth(pkt.IPv4(client4, a("10.20.0.1"), 6, tcp, pkt.V4Opts{TotalLen: 200}))},
		{"pass-bad-ihl", func() []byte { b := append([]byte(nil), web...); b[0] = 0x44; return eth(b) }()},
	}
}

// TestGoldenPackets runs named packets through the kernel program and
// compares with testdata/golden/packets.txt and with the model.
// Regenerate after checking: go test ./loader -run GoldenPackets -update
func TestGoldenPackets(t *testing.T) {
	testenv.Kernel(t)
	dc := directorConfig()
	d, m := setup(t, dc)
	var out strings.Builder
	fmt.Fprintf(&out, "# Golden packets: go test ./loader -run GoldenPackets -update\n")
	fmt.Fprintf(&out, "# Each case: the frame in and out in words (internal/datapath/pkt.Describe), then in hex.\n")
	fmt.Fprintf(&out, "# Tables: loader/datapath_test.go testConfig. Source IP %s, gateway %x.\n", dc.SrcIP, pkt.GatewayMAC)
	for _, c := range goldenCases() {
		v, o, err := testrun.Run(d.Prog, c.frame)
		if err != nil {
			t.Fatal(err)
		}
		res := m.Process(c.frame)
		if int(v) != res.Verdict || hex.EncodeToString(o) != hex.EncodeToString(res.Out) {
			t.Errorf("%s: kernel and model differ", c.name)
		}
		verdict := "XDP_TX"
		if int(v) == model.XDPPass {
			verdict = "XDP_PASS " + CounterNames()[res.Reason]
		}
		if strings.HasPrefix(c.name, "pass-") != (int(v) == model.XDPPass) {
			t.Errorf("%s: verdict %s", c.name, verdict)
		}
		fmt.Fprintf(&out, "\n%s: %s\n  in   %s\n  out  %s\n  in   %s\n  out  %s\n", c.name, verdict,
			pkt.Describe(c.frame), pkt.Describe(o), hex.EncodeToString(c.frame), hex.EncodeToString(o))
		if int(v) == model.XDPTX {
			checkGUE(t, c.name, c.frame, o, res, dc)
		}
	}
	golden.Check(t, "packets.txt", []byte(out.String()))
}

// checkGUE decodes an encapsulated frame field by field against GLB's wire
// format, independently of both the program and the model.
func checkGUE(t *testing.T, name string, in, out []byte, res model.Result, dc table.DirectorConfig) {
	t.Helper()
	l2 := 14
	if in[12] == 0x81 {
		l2 = 18
	}
	if string(out[0:6]) != string(pkt.GatewayMAC[:]) || string(out[6:12]) != string(in[0:6]) {
		t.Errorf("%s: MACs %x -> %x", name, out[6:12], out[0:6])
	}
	ip := out[l2:]
	hops := res.Hops()
	listed := len(hops) - 1
	if ip[0] != 0x45 || ip[8] != 64 || ip[9] != 17 || ip[6] != 0x40 || ip[4] != 0 || ip[5] != 0 {
		t.Errorf("%s: outer IPv4 header %x", name, ip[:20])
	}
	if gue.Checksum(ip[:20]) != 0 {
		t.Errorf("%s: outer IPv4 checksum wrong", name)
	}
	if netip.AddrFrom4([4]byte(ip[12:16])) != dc.SrcIP || netip.AddrFrom4([4]byte(ip[16:20])) != hops[0] {
		t.Errorf("%s: outer %v -> %v", name, ip[12:16], ip[16:20])
	}
	udp := ip[20:]
	if udp[2] != 0x4c || udp[3] != 0x43 || udp[0]&0x80 == 0 || udp[6] != 0 || udp[7] != 0 {
		t.Errorf("%s: UDP header %x", name, udp[:8])
	}
	gue := udp[8:]
	if int(gue[0]) != 1+listed || gue[2] != 0 || gue[3] != 0 || gue[4] != 0 || gue[5] != 0 || gue[6] != 0 || int(gue[7]) != listed {
		t.Errorf("%s: GUE header %x", name, gue[:8])
	}
	innerV := in[l2] >> 4
	if (innerV == 4 && gue[1] != 4) || (innerV == 6 && gue[1] != 41) {
		t.Errorf("%s: GUE protocol %d for IPv%d", name, gue[1], innerV)
	}
	for i := 0; i < listed; i++ {
		if netip.AddrFrom4([4]byte(gue[8+4*i:12+4*i])) != hops[1+i] {
			t.Errorf("%s: hop %d", name, i+1)
		}
	}
	if string(gue[8+4*listed:]) != string(in[l2:]) {
		t.Errorf("%s: inner packet altered", name)
	}
}

// TestGoldenPacketsIPv6Underlay is TestGoldenPackets for tables of IPv6
// backends, whose GUE goes over IPv6 (docs/wire.md): IPv4 and IPv6
// clients, a VLAN tag, the alternate hash's four hops. Each output is also
// decoded field by field, apart from the program and the model.
func TestGoldenPacketsIPv6Underlay(t *testing.T) {
	testenv.Kernel(t)
	dns := pkt.IPv4(client4, a("10.30.9.9"), 17, pkt.UDP(40000, 53, []byte("query")), pkt.V4Opts{})
	v6 := pkt.IPv6(client6, a("fd00:30::9"), 6, pkt.TCP(40001, 8080, 0x02, nil))
	cases := []goldenCase{
		{"ipv4-client-udp", pkt.Frame(dns)},
		{"ipv6-client-tcp", pkt.Frame(v6)},
		{"ipv4-client-vlan", pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 42, 0x0800, dns)},
		{"ipv4-table-beside", pkt.Frame(pkt.IPv4(client4, a("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x02, nil), pkt.V4Opts{}))},
	}
	var out strings.Builder
	fmt.Fprintf(&out, "# Golden packets, IPv6 underlay: go test ./loader -run GoldenPacketsIPv6Underlay -update\n")
	fmt.Fprintf(&out, "# Tables: loader/datapath_test.go underlay6Config (dns and v6 on IPv6 backends); the last case has the alternate hash's hops.\n")
	for _, alt := range []bool{false, true} {
		dc := directorConfig()
		underlay6(&dc)
		if alt {
			dc.AltHashFields = table.HashSrcAddr | table.HashSrcPort
		}
		d, m := setupWith(t, dc, underlay6Config)
		for _, c := range cases {
			if alt && c.name != "ipv6-client-tcp" {
				continue
			}
			name := c.name
			if alt {
				name += "-alt-hash"
			}
			v, o, err := testrun.Run(d.Prog, c.frame)
			if err != nil {
				t.Fatal(err)
			}
			res := m.Process(c.frame)
			if int(v) != model.XDPTX || hex.EncodeToString(o) != hex.EncodeToString(res.Out) {
				t.Errorf("%s: verdict %d; kernel and model agree: %v", name, v, hex.EncodeToString(o) == hex.EncodeToString(res.Out))
			}
			fmt.Fprintf(&out, "\n%s:\n  in   %s\n  out  %s\n  out  %s\n", name, pkt.Describe(c.frame), pkt.Describe(o), hex.EncodeToString(o))
			if c.name != "ipv4-table-beside" {
				checkGUE6(t, name, c.frame, o, res, dc)
			}
		}
	}
	golden.Check(t, "packets-underlay6.txt", []byte(out.String()))
}

// checkGUE6 decodes a frame sent over the IPv6 underlay by hand.
func checkGUE6(t *testing.T, name string, in, out []byte, res model.Result, dc table.DirectorConfig) {
	t.Helper()
	l2 := 14
	if in[12] == 0x81 {
		l2 = 18
	}
	if string(out[0:6]) != string(dc.GatewayMAC6) || string(out[6:12]) != string(in[0:6]) || out[l2-2] != 0x86 || out[l2-1] != 0xdd {
		t.Errorf("%s: L2 % x", name, out[:l2])
	}
	ip := out[l2:]
	hops := res.Hops()
	listed := len(hops) - 1
	inner := len(in) - l2
	plen := 8 + 8 + 16*listed + inner
	if ip[0]>>4 != 6 || ip[0]&0xf != 0 || ip[1]&0xf0 != 0 || int(ip[4])<<8|int(ip[5]) != plen || ip[6] != 17 || ip[7] != 64 {
		t.Errorf("%s: outer IPv6 header % x", name, ip[:8])
	}
	if netip.AddrFrom16([16]byte(ip[8:24])) != dc.SrcIP6 || netip.AddrFrom16([16]byte(ip[24:40])) != hops[0] {
		t.Errorf("%s: outer %v -> %v", name, ip[8:24], ip[24:40])
	}
	udp := ip[40:]
	if udp[2] != 0x4c || udp[3] != 0x43 || udp[0]&0x80 == 0 || int(udp[4])<<8|int(udp[5]) != plen || udp[6] != 0 || udp[7] != 0 {
		t.Errorf("%s: UDP header % x", name, udp[:8])
	}
	g := udp[8:]
	if int(g[0]) != 1+4*listed || g[2] != 0 || g[3] != 0 || g[4] != 0x64 || g[5] != 0x01 || g[6] != 0 || int(g[7]) != listed {
		t.Errorf("%s: GUE header % x", name, g[:8])
	}
	for i, h := range hops[1:] {
		if netip.AddrFrom16([16]byte(g[8+16*i:])) != h {
			t.Errorf("%s: hop %d is %v, want %s", name, i+1, g[8+16*i:8+16*i+16], h)
		}
	}
	if string(g[8+16*listed:]) != string(in[l2:]) {
		t.Errorf("%s: the inner packet changed", name)
	}
}

// TestGoldenTooBig: packets their encapsulation takes over the link's MTU
// (outbound_mtu 1400 here), on each underlay. A full-sized TCP segment
// with DF, and any IPv6 one, is answered with ICMP too-big; one without
// DF, and an ICMP error, is encapsulated all the same. Each reply is
// decoded by hand (checkTooBig), apart from the program and the model.
func TestGoldenTooBig(t *testing.T) {
	testenv.Kernel(t)
	payload := make([]byte, 1400)
	for i := range payload {
		payload[i] = byte(i)
	}
	df := pkt.IPv4(client4, a("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x10, payload), pkt.V4Opts{FragOff: 0x4000})
	noDF := pkt.IPv4(client4, a("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x10, payload), pkt.V4Opts{})
	v6 := pkt.IPv6(client6, a("fd00:20::1"), 6, pkt.TCP(40001, 443, 0x10, payload))
	quoted := pkt.IPv4(a("10.20.0.1"), client4, 6, pkt.TCP(80, 40000, 0x10, payload), pkt.V4Opts{})
	icmpErr := pkt.IPv4(a("198.51.100.1"), a("10.20.0.1"), 1, pkt.ICMP(3, 4, 1400, quoted), pkt.V4Opts{FragOff: 0x4000})
	dns := pkt.IPv4(client4, a("10.30.9.9"), 17, pkt.UDP(40000, 53, payload), pkt.V4Opts{FragOff: 0x4000})
	v6dns := pkt.IPv6(client6, a("fd00:30::9"), 6, pkt.TCP(40001, 8080, 0x10, payload))
	var out strings.Builder
	fmt.Fprintf(&out, "# Golden packets too big for the link (outbound_mtu 1400): go test ./loader -run GoldenTooBig -update\n")
	for _, u := range []struct {
		name   string
		cfg    string
		edit   func(*table.DirectorConfig)
		esize  int
		cases  []goldenCase
		answer map[string]bool // the cases answered with too-big
	}{
		{"ipv4-underlay", testConfig, func(*table.DirectorConfig) {}, gue.Size(2), []goldenCase{
			{"ipv4-df", pkt.Frame(df)},
			{"ipv4-df-vlan", pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 42, 0x0800, df)},
			{"ipv4-no-df", pkt.Frame(noDF)},
			{"ipv6", pkt.Frame(v6)},
			{"icmp-error", pkt.Frame(icmpErr)},
		}, map[string]bool{"ipv4-df": true, "ipv4-df-vlan": true, "ipv6": true}},
		{"ipv6-underlay", underlay6Config, underlay6, gue.Size6(2), []goldenCase{
			{"ipv4-df", pkt.Frame(dns)},
			{"ipv6", pkt.Frame(v6dns)},
		}, map[string]bool{"ipv4-df": true, "ipv6": true}},
	} {
		dc := directorConfig()
		u.edit(&dc)
		dc.OutboundMTU = 1400
		d, m := setupWith(t, dc, u.cfg)
		for _, c := range u.cases {
			name := u.name + "/" + c.name
			v, o, err := testrun.Run(d.Prog, c.frame)
			if err != nil {
				t.Fatal(err)
			}
			res := m.Process(c.frame)
			if int(v) != model.XDPTX || hex.EncodeToString(o) != hex.EncodeToString(res.Out) {
				t.Errorf("%s: verdict %d; kernel and model agree: %v", name, v, hex.EncodeToString(o) == hex.EncodeToString(res.Out))
			}
			if got := res.TooBig == abi.CICMPTooBig; got != u.answer[c.name] {
				t.Errorf("%s: answered %v, want %v", name, got, u.answer[c.name])
			}
			fmt.Fprintf(&out, "\n%s:\n  in   %s\n  out  %s\n  out  %s\n", name, pkt.Describe(c.frame), pkt.Describe(o), hex.EncodeToString(o))
			if u.answer[c.name] {
				checkTooBig(t, name, c.frame, o, 1400-u.esize)
			}
		}
	}
	golden.Check(t, "packets-toobig.txt", []byte(out.String()))
}

// checkTooBig decodes a too-big reply by hand: back through the MACs the
// packet came by, from its destination to its source, a checksum that
// adds up (over the pseudo-header, for ICMPv6), the MTU the client may
// send, and the packet's first 128 bytes quoted.
func checkTooBig(t *testing.T, name string, in, out []byte, mtu int) {
	t.Helper()
	l2 := 14
	if in[12] == 0x81 {
		l2 = 18
		if string(out[12:16]) != string(in[12:16]) {
			t.Errorf("%s: VLAN tag %x, want %x", name, out[12:16], in[12:16])
		}
	}
	if string(out[0:6]) != string(in[6:12]) || string(out[6:12]) != string(in[0:6]) || string(out[l2-2:l2]) != string(in[l2-2:l2]) {
		t.Errorf("%s: L2 header %x for %x", name, out[:l2], in[:l2])
	}
	ip, orig := out[l2:], in[l2:]
	var icmp []byte
	var sum uint32
	if orig[0]>>4 == 4 {
		icmp = ip[20:]
		if ip[0] != 0x45 || ip[8] != 64 || ip[9] != 1 || int(ip[2])<<8|int(ip[3]) != len(ip) || gue.Checksum(ip[:20]) != 0 ||
			string(ip[12:16]) != string(orig[16:20]) || string(ip[16:20]) != string(orig[12:16]) {
			t.Errorf("%s: IPv4 header %x", name, ip[:20])
		}
		if icmp[0] != 3 || icmp[1] != 4 || int(icmp[6])<<8|int(icmp[7]) != mtu || icmp[4] != 0 || icmp[5] != 0 {
			t.Errorf("%s: ICMP header %x, want frag-needed with MTU %d", name, icmp[:8], mtu)
		}
	} else {
		icmp = ip[40:]
		if ip[0] != 0x60 || ip[6] != 58 || ip[7] != 64 || int(ip[4])<<8|int(ip[5]) != len(icmp) ||
			string(ip[8:24]) != string(orig[24:40]) || string(ip[24:40]) != string(orig[8:24]) {
			t.Errorf("%s: IPv6 header %x", name, ip[:40])
		}
		if icmp[0] != 2 || icmp[1] != 0 || int(icmp[4])<<24|int(icmp[5])<<16|int(icmp[6])<<8|int(icmp[7]) != max(mtu, 1280) {
			t.Errorf("%s: ICMPv6 header %x, want packet-too-big with MTU %d", name, icmp[:8], max(mtu, 1280))
		}
		for i := 8; i < 40; i += 2 { // the pseudo-header: addresses, length, next header
			sum += uint32(ip[i])<<8 | uint32(ip[i+1])
		}
		sum += uint32(len(icmp)) + 58
	}
	for i := 0; i+1 < len(icmp); i += 2 {
		sum += uint32(icmp[i])<<8 | uint32(icmp[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("%s: the ICMP checksum does not add up (%#x)", name, sum)
	}
	if string(icmp[8:]) != string(orig[:128]) {
		t.Errorf("%s: quoted %d bytes %x, want the packet's first 128", name, len(icmp)-8, icmp[8:min(len(icmp), 48)])
	}
}
