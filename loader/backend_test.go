package loader

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

// gueFrame builds a director's GUE frame (internal/datapath/gue) around an inner IP
// packet, to this host (192.168.77.1), with the hops listed after it and
// the next-hop index.
func gueFrame(t testing.TB, inner []byte, next uint8, hops ...netip.Addr) []byte {
	t.Helper()
	h := gue.Header{Src: a("192.0.2.1"), Hops: append([]netip.Addr{a("192.168.77.1")}, hops...), SourcePort: 0x8123,
		NextHop: next, Proto: gue.ProtoIPv4}
	if inner[0]>>4 == 6 {
		h.Proto = gue.ProtoIPv6
	}
	f := pkt.Eth(pkt.DirectorMAC, pkt.GatewayMAC, 0, 0x0800, nil)
	f = h.Append(f, len(inner))
	return append(f, inner...)
}

// backendHost sets up this (private) namespace as a backend host for the
// backend program's tests: the VIP 10.0.0.1 and a client address 10.0.0.2
// on lo, the veth pair be0/be1, and a real TCP connection to the VIP from
// the client, whose port it returns with a func closing it all.
func backendHost() (cport uint16, done func(), err error) {
	lo, _ := netlink.LinkByName("lo")
	netlink.LinkSetUp(lo)
	for _, s := range []string{"10.0.0.1/32", "10.0.0.2/32"} {
		ad, _ := netlink.ParseAddr(s)
		if err := netlink.AddrAdd(lo, ad); err != nil {
			return 0, nil, err
		}
	}
	if err := testrun.Veth("be0", "be1"); err != nil {
		return 0, nil, err
	}
	ln, err := net.Listen("tcp4", "10.0.0.1:80")
	if err != nil {
		return 0, nil, err
	}
	conn, err := net.DialTCP("tcp4", &net.TCPAddr{IP: net.ParseIP("10.0.0.2")}, &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 80})
	if err != nil {
		ln.Close()
		return 0, nil, err
	}
	srv, err := ln.Accept()
	if err != nil {
		conn.Close()
		ln.Close()
		return 0, nil, err
	}
	return uint16(conn.LocalAddr().(*net.TCPAddr).Port), func() { srv.Close(); conn.Close(); ln.Close() }, nil
}

// TestBackendProgram runs the backend program with BPF_PROG_RUN in a
// private namespace that has a real TCP connection, a listener and a route.
func TestBackendProgram(t *testing.T) {
	testenv.Kernel(t)
	err := testrun.InNetns(func() error {
		cport, done, err := backendHost()
		if err != nil {
			return err
		}
		defer done()
		be0, _ := netlink.LinkByName("be0")
		ad, _ := netlink.ParseAddr("192.168.77.1/24")
		netlink.AddrAdd(be0, ad)
		mac, _ := net.ParseMAC("02:00:00:00:77:02")
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: be0.Attrs().Index, IP: net.ParseIP("192.168.77.2"), HardwareAddr: mac,
			State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}); err != nil {
			return err
		}

		if err := os.WriteFile("/proc/sys/net/ipv4/conf/all/forwarding", []byte("1"), 0o644); err != nil {
			return err
		}
		// Another interface, with a resolved neighbour out of it.
		if err := testrun.Veth("bx0", "bx1"); err != nil {
			return err
		}
		bx0, _ := netlink.LinkByName("bx0")
		adx, _ := netlink.ParseAddr("192.168.88.1/24")
		netlink.AddrAdd(bx0, adx)
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: bx0.Attrs().Index, IP: net.ParseIP("192.168.88.2"), HardwareAddr: mac,
			State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}); err != nil {
			return err
		}

		b, err := LoadBackend("")
		if err != nil {
			return err
		}
		defer b.Close()
		if err := b.SetSelf(a("192.168.77.1")); err != nil {
			return err
		}
		// Another of this host's addresses: GUE for it is accepted too.
		if err := b.Accept([]netip.Prefix{pf("192.168.77.1/32"), pf("10.0.0.1/32"), pf("fd00::1/128")}); err != nil {
			return err
		}
		if acc, err := b.Accepted(); err != nil || len(acc) != 3 || acc[0] != pf("10.0.0.1/32") || acc[1] != pf("192.168.77.1/32") || acc[2] != pf("fd00::1/128") {
			return fmt.Errorf("accepted %v, %v", acc, err)
		}
		// GUE is sent on only to, and only when it came from, a listed
		// director or backend (issue 46, item 6).
		if err := b.Trust([]netip.Prefix{pf("192.0.2.1/32"), pf("192.168.77.0/24"), pf("192.168.88.0/24"), pf("203.0.113.50/32"), pf("2001:db8::1/128")}); err != nil {
			return err
		}
		capt, err := b.Capture(CaptureFilter{Table: -1})
		if err != nil {
			return err
		}
		defer func() {
			if loss, err := capt.Close(); err != nil || loss.Total() != 0 {
				t.Errorf("the backend's capture: lost %+v, %v", loss, err)
			}
		}()
		client, vip := a("10.0.0.2"), a("10.0.0.1")
		tcp := func(sport uint16, flags byte) []byte {
			return pkt.IPv4(client, vip, 6, pkt.TCP(sport, 80, flags, []byte("x")), pkt.V4Opts{})
		}
		other := a("192.168.77.2")
		tcp6 := func(flags byte) []byte {
			return pkt.IPv6(a("2001:db8::2"), a("fd00::1"), 6, pkt.TCP(1002, 80, flags, []byte("x")))
		}
		for _, c := range []backendCase{
			{"not GUE", pkt.Frame(tcp(1000, 0x10)), 2, "pass_not_gue", nil},
			{"GUE for another host", func() []byte {
				f := gueFrame(t, tcp(1000, 0x02), 0, other)
				copy(f[14+16:], []byte{192, 168, 77, 9})
				return f
			}(), 2, "pass_not_gue", nil},
			{"SYN", gueFrame(t, tcp(1000, 0x02), 0, other), 2, "decap_syn", tcp(1000, 0x02)},
			{"SYN to another local address", func() []byte {
				f := gueFrame(t, tcp(1000, 0x02), 0, other)
				copy(f[14+16:], []byte{10, 0, 0, 1})
				return f
			}(), 2, "decap_syn", tcp(1000, 0x02)},
			{"known connection", gueFrame(t, tcp(cport, 0x10), 0, other), 2, "decap_known", tcp(cport, 0x10)},
			{"UDP", gueFrame(t, pkt.IPv4(client, vip, 17, pkt.UDP(5, 53, nil), pkt.V4Opts{}), 0, other), 2, "decap_not_tcp", pkt.IPv4(client, vip, 17, pkt.UDP(5, 53, nil), pkt.V4Opts{})},
			{"unknown, last hop", gueFrame(t, tcp(1001, 0x10), 1, other), 2, "decap_last_hop", tcp(1001, 0x10)},
			{"IPv6 SYN", gueFrame(t, tcp6(0x02), 0, other), 2, "decap_syn", tcp6(0x02)},
			{"IPv6 unknown, forwarded", gueFrame(t, tcp6(0x10), 0, other), 3, "forwarded", nil},
			{"unknown, forwarded", gueFrame(t, tcp(1001, 0x10), 0, other), 3, "forwarded", nil},
			{"unknown, no route", gueFrame(t, tcp(1001, 0x10), 0, a("203.0.113.50")), 1, "drop_no_route", nil},
			{"bad GUE", func() []byte { f := gueFrame(t, tcp(1000, 0x02), 0, other); f[14+28] = 0x40; return f }(), 1, "drop_malformed", nil},
			// Never a relay: an inner packet to an address not this host's
			// is dropped, whatever it is.
			{"SYN to another host", gueFrame(t, pkt.IPv4(client, a("198.51.100.7"), 6, pkt.TCP(1000, 80, 0x02, nil), pkt.V4Opts{}), 0, other), 1, "drop_not_local", nil},
			{"UDP to another host", gueFrame(t, pkt.IPv4(client, a("198.51.100.7"), 17, pkt.UDP(5, 53, nil), pkt.V4Opts{}), 1, other), 1, "drop_not_local", nil},
			{"IPv6 to another host", gueFrame(t, pkt.IPv6(a("2001:db8::2"), a("2001:db8::99"), 17, pkt.UDP(5, 53, nil)), 0, other), 1, "drop_not_local", nil},
			// Options before the TCP header.
			{"SYN with IP options", gueFrame(t, withOpts(tcp(1000, 0x02)), 0, other), 2, "decap_syn", withOpts(tcp(1000, 0x02))},
			{"known connection with IP options", gueFrame(t, withOpts(tcp(cport, 0x10)), 0, other), 2, "decap_known", withOpts(tcp(cport, 0x10))},
			// A next hop without a neighbour entry: left to the kernel.
			{"unknown, next hop unresolved", gueFrame(t, tcp(1001, 0x10), 0, a("192.168.77.3")), 2, "forwarded_stack", nil},
			{"unknown, next hop out another interface", gueFrame(t, tcp(1001, 0x10), 0, a("192.168.88.2")), 2, "forwarded_stack", nil},
			// Issue 46, item 6: GUE from a source not trusted is dropped,
			// even a SYN; a trusted one's next hop outside the list is
			// not sent on.
			{"spoofed source", spoofed(gueFrame(t, tcp(1001, 0x10), 0, other), 12, "203.0.113.9"), 1, "drop_untrusted", nil},
			{"spoofed source, SYN", spoofed(gueFrame(t, tcp(1000, 0x02), 0, other), 12, "203.0.113.9"), 1, "drop_untrusted", nil},
			{"untrusted next hop", gueFrame(t, tcp(1001, 0x10), 0, a("198.18.5.5")), 1, "drop_untrusted_hop", nil},
		} {
			c := onLoopback(c)
			out, _, _, err := runBackendCase(b, be0.Attrs().Index, c)
			if err != nil {
				return err
			}
			// The capture saw it as it left, with its verdict and reason.
			capt.SetDeadline(time.Now().Add(2 * time.Second))
			r, err := capt.Read()
			if err != nil {
				return fmt.Errorf("%s: not captured: %w", c.name, err)
			}
			if uint32(r.Action) != c.verdict || BackendCounterNames()[r.Reason] != c.counter || !bytes.Equal(r.Frame, out) {
				return fmt.Errorf("%s: captured %d %s %x, want %d %s %x", c.name, r.Action, BackendCounterNames()[r.Reason], r.Frame, c.verdict, c.counter, out)
			}
			if c.counter == "forwarded_stack" {
				// Outer destination: the next hop; source kept (the kernel
				// would take its own for a spoofed one); next-hop index
				// advanced; the checksum right.
				ip := out[14:]
				if netip.AddrFrom4([4]byte(ip[12:16])) != a("192.0.2.1") || netip.AddrFrom4([4]byte(ip[16:20])) != netip.AddrFrom4([4]byte(c.in[14+28+8:14+28+12])) ||
					ip[28+6] != 1 || gue.Checksum(ip[:20]) != 0 {
					return fmt.Errorf("frame for the stack to forward %x", out)
				}
			}
			if c.counter == "forwarded" {
				// Outer source: this host; destination: the next hop; its
				// MAC from the neighbour table; next-hop index advanced.
				ip := out[14:]
				if netip.AddrFrom4([4]byte(ip[12:16])) != a("192.168.77.1") || netip.AddrFrom4([4]byte(ip[16:20])) != other ||
					!bytes.Equal(out[0:6], mac) || ip[28+6] != 1 || gue.Checksum(ip[:20]) != 0 {
					return fmt.Errorf("forwarded frame %x", out)
				}
			}
		}
		// With no list, GUE is taken from anyone and never sent on: an
		// unknown connection is the last hop's.
		if err := b.Trust(nil); err != nil {
			return err
		}
		for _, c := range []backendCase{
			{"no list: spoofed SYN", spoofed(gueFrame(t, tcp(1000, 0x02), 0, other), 12, "203.0.113.9"), 2, "decap_syn", tcp(1000, 0x02)},
			{"no list: unknown", gueFrame(t, tcp(1001, 0x10), 0, other), 2, "decap_last_hop", tcp(1001, 0x10)},
		} {
			if _, _, _, err := runBackendCase(b, be0.Attrs().Index, c); err != nil {
				return err
			}
		}
		if on, err := b.SecondChance(); err != nil || on {
			return fmt.Errorf("second chance with no list: %v %v", on, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// spoofed is frame f with its outer source, at offset off after the
// Ethernet header, replaced by src (the IPv4 header checksum fixed).
func spoofed(f []byte, off int, src string) []byte {
	ip := f[14:]
	copy(ip[off:], a(src).AsSlice())
	if ip[0]>>4 == 4 {
		ip[10], ip[11] = 0, 0
		c := gue.Checksum(ip[:20])
		ip[10], ip[11] = byte(c>>8), byte(c)
	}
	return f
}

// onLoopback is c as a kernel whose BPF_PROG_RUN takes no XDP context
// (before 5.13) runs it: as if it came in on loopback. A packet sent on to
// the next hop then leaves by another interface than it came in by, so the
// program leaves it to the stack (forwarded_stack) rather than sending it
// back out (forwarded). The testbed's drains check forwarded end to end
// on such kernels, through real interfaces.
func onLoopback(c backendCase) backendCase {
	if !testrun.HaveRunContext() && c.counter == "forwarded" {
		c.verdict, c.counter = 2, "forwarded_stack"
	}
	return c
}

// backendCase is a frame for the backend program, the verdict and the
// counter it should give, and for a decapsulated one, the inner packet
// expected after the Ethernet header.
type backendCase struct {
	name    string
	in      []byte
	verdict uint32
	counter string
	decap   []byte
}

// runBackendCase runs c through b's program as if received on ifindex and
// checks its verdict, its counter, and a decapsulation's bytes (MACs kept,
// the inner packet's ethertype). It returns the output and the counters
// before and after.
func runBackendCase(b *BackendProgram, ifindex int, c backendCase) (out []byte, before, after map[string]uint64, err error) {
	before, _ = b.Counters()
	run := func() (uint32, []byte, error) { return testrun.RunOn(b.Prog(), c.in, ifindex) }
	if !testrun.HaveRunContext() {
		run = func() (uint32, []byte, error) { return testrun.Run(b.Prog(), c.in) }
	}
	v, out, err := run()
	if err != nil {
		return nil, nil, nil, err
	}
	after, _ = b.Counters()
	if v != c.verdict || after[c.counter] != before[c.counter]+1 {
		return nil, nil, nil, fmt.Errorf("%s: verdict %d, %s %d -> %d (counters %v -> %v)", c.name, v, c.counter, before[c.counter], after[c.counter], before, after)
	}
	etype := byte(0x08)
	if c.decap != nil && c.decap[0]>>4 == 6 {
		etype = 0x86
	}
	if c.decap != nil && (!bytes.Equal(out[14:], c.decap) || !bytes.Equal(out[:12], c.in[:12]) || out[12] != etype) {
		return nil, nil, nil, fmt.Errorf("%s: decapsulated to %x", c.name, out)
	}
	return out, before, after, nil
}

// gue6Frame is gueFrame over IPv6 (docs/wire.md): to this host
// (fd00:77::1), from the director's IPv6 source.
func gue6Frame(t *testing.T, inner []byte, next uint8, hops ...netip.Addr) []byte {
	t.Helper()
	h := gue.Header{Src: a("2001:db8::1"), Hops: append([]netip.Addr{a("fd00:77::1")}, hops...), SourcePort: 0x8123,
		NextHop: next, Proto: gue.ProtoIPv4, FlowLabel: 0x12345}
	if inner[0]>>4 == 6 {
		h.Proto = gue.ProtoIPv6
	}
	f := pkt.Eth(pkt.DirectorMAC, pkt.GatewayMAC, 0, 0x86dd, nil)
	f = h.Append(f, len(inner))
	return append(f, inner...)
}

// TestBackendProgramIPv6Underlay is TestBackendProgram for GUE over IPv6:
// new, known and non-TCP connections decapsulated, an unknown one sent on
// to the next IPv6 hop from this host's IPv6 address, GLB's IPv4 hop-list
// type refused over IPv6, and the family counted.
func TestBackendProgramIPv6Underlay(t *testing.T) {
	testenv.Kernel(t)
	err := testrun.InNetns(func() error {
		cport, done, err := backendHost()
		if err != nil {
			return err
		}
		defer done()
		be0, _ := netlink.LinkByName("be0")
		ad, _ := netlink.ParseAddr("fd00:77::1/64")
		ad.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(be0, ad); err != nil {
			return err
		}
		mac, _ := net.ParseMAC("02:00:00:00:77:06")
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: be0.Attrs().Index, IP: net.ParseIP("fd00:77::2"), HardwareAddr: mac,
			State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V6}); err != nil {
			return err
		}
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
			return err
		}

		b, err := LoadBackend("")
		if err != nil {
			return err
		}
		defer b.Close()
		if err := b.SetSelf(a("192.168.77.1"), a("fd00:77::1")); err != nil {
			return err
		}
		if err := b.Accept([]netip.Prefix{pf("fd00:77::1/128"), pf("192.168.77.1/32"), pf("10.0.0.1/32")}); err != nil {
			return err
		}
		if acc, err := b.Accepted(); err != nil || len(acc) != 3 || acc[0] != pf("10.0.0.1/32") || acc[2] != pf("fd00:77::1/128") {
			return fmt.Errorf("accepted %v, %v", acc, err)
		}
		if err := b.Trust([]netip.Prefix{pf("2001:db8::1/128"), pf("fd00:77::/64"), pf("2001:db8:99::50/128")}); err != nil {
			return err
		}
		client, vip, other := a("10.0.0.2"), a("10.0.0.1"), a("fd00:77::2")
		tcp := func(sport uint16, flags byte) []byte {
			return pkt.IPv4(client, vip, 6, pkt.TCP(sport, 80, flags, []byte("x")), pkt.V4Opts{})
		}
		for _, c := range []backendCase{
			{"GUE over IPv6 for another host", func() []byte {
				f := gue6Frame(t, tcp(1000, 0x02), 0, other)
				f[14+39] = 9
				return f
			}(), 2, "pass_not_gue", nil},
			{"SYN", gue6Frame(t, tcp(1000, 0x02), 0, other), 2, "decap_syn", tcp(1000, 0x02)},
			{"known connection", gue6Frame(t, tcp(cport, 0x10), 0, other), 2, "decap_known", tcp(cport, 0x10)},
			{"UDP", gue6Frame(t, pkt.IPv4(client, vip, 17, pkt.UDP(5, 53, nil), pkt.V4Opts{}), 0, other), 2, "decap_not_tcp", pkt.IPv4(client, vip, 17, pkt.UDP(5, 53, nil), pkt.V4Opts{})},
			{"unknown, last hop", gue6Frame(t, tcp(1001, 0x10), 1, other), 2, "decap_last_hop", tcp(1001, 0x10)},
			{"unknown, forwarded", gue6Frame(t, tcp(1001, 0x10), 0, other), 3, "forwarded", nil},
			{"unknown, no route", gue6Frame(t, tcp(1001, 0x10), 0, a("2001:db8:99::50")), 1, "drop_no_route", nil},
			{"unknown, next hop unresolved", gue6Frame(t, tcp(1001, 0x10), 0, a("fd00:77::3")), 2, "forwarded_stack", nil},
			{"to another host", gue6Frame(t, pkt.IPv4(client, a("198.51.100.7"), 6, pkt.TCP(1000, 80, 0x02, nil), pkt.V4Opts{}), 0, other), 1, "drop_not_local", nil},
			{"GLB's type over IPv6", func() []byte { f := gue6Frame(t, tcp(1000, 0x02), 0, other); f[14+52], f[14+53] = 0, 0; return f }(), 1, "drop_malformed", nil},
			{"spoofed source", spoofed(gue6Frame(t, tcp(1001, 0x10), 0, other), 8, "2001:db8:66::9"), 1, "drop_untrusted", nil},
			{"untrusted next hop", gue6Frame(t, tcp(1001, 0x10), 0, a("2001:db8:5::5")), 1, "drop_untrusted_hop", nil},
		} {
			next := a("fd00:77::3")
			if c.counter == "forwarded" {
				next = other
			}
			c := onLoopback(c)
			out, before, after, err := runBackendCase(b, be0.Attrs().Index, c)
			if err != nil {
				return err
			}
			if c.counter != "pass_not_gue" && after["gue6"] != before["gue6"]+1 {
				return fmt.Errorf("%s: gue6 not counted", c.name)
			}
			if c.counter == "forwarded_stack" {
				// Outer destination: the next hop; source kept (the kernel
				// would take its own for a spoofed one); next-hop index
				// advanced; the checksum right.
				ip := out[14:]
				if !bytes.Equal(ip[8:24], c.in[14+8:14+24]) || netip.AddrFrom16([16]byte(ip[24:40])) != next || ip[48+6] != 1 {
					return fmt.Errorf("frame for the stack to forward %x", out)
				}
			}
			if c.counter == "forwarded" {
				ip := out[14:]
				if netip.AddrFrom16([16]byte(ip[8:24])) != a("fd00:77::1") || netip.AddrFrom16([16]byte(ip[24:40])) != other ||
					!bytes.Equal(out[0:6], mac) || ip[48+6] != 1 || ip[7] != 64 || !bytes.Equal(ip[56:], c.in[14+56:]) {
					return fmt.Errorf("forwarded frame %x", out)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// withOpts is an IPv4 packet with 8 bytes of options (a router alert and
// padding) inserted after its header.
func withOpts(p []byte) []byte {
	src, dst := netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
	return pkt.IPv4(src, dst, p[9], p[20:], pkt.V4Opts{Options: []byte{0x94, 0x04, 0, 0, 1, 1, 1, 0}})
}
