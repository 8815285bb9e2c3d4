package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/explain"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
)

// backendLab is a backend host for backend explain's tests, in the
// current (private) namespace: the VIPs 10.10.10.10 and fd00:10::10 on lo
// with real TCP connections to them on port 80 from 198.51.100.5 and
// fd00:51::5, the receiving interface be0 (10.77.0.2/24, fd00:77::2/64)
// with a resolved next hop (.10, ::10) and an unresolved one (.11, ::11),
// another interface ot0 routing 10.99.0.0/24 and fd00:99::/64, and a
// blackhole route (10.66.0.0/24, fd00:66::/64).
type backendLab struct {
	conns []netip.AddrPort // the clients of the real connections
	close func()
}

func newBackendLab(nconns int) (*backendLab, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, err
	}
	netlink.LinkSetUp(lo)
	for _, s := range []string{"10.10.10.10/32", "198.51.100.5/32", "fd00:10::10/128", "fd00:51::5/128"} {
		if err := addAddr(lo, s); err != nil {
			return nil, err
		}
	}
	for _, p := range [][2]string{{"be0", "be1"}, {"ot0", "ot1"}} {
		if err := testrun.Veth(p[0], p[1]); err != nil {
			return nil, err
		}
	}
	be0, _ := netlink.LinkByName("be0")
	ot0, _ := netlink.LinkByName("ot0")
	for _, a := range []struct {
		l netlink.Link
		s string
	}{{be0, "10.77.0.2/24"}, {be0, "fd00:77::2/64"}, {ot0, "10.88.0.2/24"}, {ot0, "fd00:88::2/64"}} {
		if err := addAddr(a.l, a.s); err != nil {
			return nil, err
		}
	}
	for _, n := range []struct {
		l  netlink.Link
		ip string
	}{{be0, "10.77.0.10"}, {be0, "fd00:77::10"}, {ot0, "10.88.0.1"}, {ot0, "fd00:88::1"}} {
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: n.l.Attrs().Index, State: netlink.NUD_PERMANENT, IP: net.ParseIP(n.ip),
			HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0x77, 0x10}, Family: family(n.ip)}); err != nil {
			return nil, fmt.Errorf("neighbour %s: %w", n.ip, err)
		}
	}
	for _, r := range []struct{ dst, gw string }{{"10.99.0.0/24", "10.88.0.1"}, {"fd00:99::/64", "fd00:88::1"}} {
		_, dst, _ := net.ParseCIDR(r.dst)
		if err := netlink.RouteAdd(&netlink.Route{Dst: dst, Gw: net.ParseIP(r.gw), LinkIndex: ot0.Attrs().Index}); err != nil {
			return nil, fmt.Errorf("route %s: %w", r.dst, err)
		}
	}
	for _, s := range []string{"10.66.0.0/24", "fd00:66::/64"} {
		_, dst, _ := net.ParseCIDR(s)
		if err := netlink.RouteAdd(&netlink.Route{Dst: dst, Type: unix.RTN_BLACKHOLE}); err != nil {
			return nil, fmt.Errorf("route %s: %w", s, err)
		}
	}
	if err := setForwarding("be0", true); err != nil {
		return nil, err
	}
	l := &backendLab{}
	var closers []func()
	l.close = func() {
		for _, c := range closers {
			c()
		}
	}
	for _, fam := range []struct{ vip, client string }{{"10.10.10.10", "198.51.100.5"}, {"fd00:10::10", "fd00:51::5"}} {
		ln, err := net.Listen("tcp", net.JoinHostPort(fam.vip, "80"))
		if err != nil {
			l.close()
			return nil, err
		}
		closers = append(closers, func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				closers = append(closers, func() { c.Close() })
			}
		}()
		for i := 0; i < nconns; i++ {
			c, err := net.DialTCP("tcp", &net.TCPAddr{IP: net.ParseIP(fam.client)}, &net.TCPAddr{IP: net.ParseIP(fam.vip), Port: 80})
			if err != nil {
				l.close()
				return nil, err
			}
			closers = append(closers, func() { c.Close() })
			l.conns = append(l.conns, c.LocalAddr().(*net.TCPAddr).AddrPort())
		}
	}
	return l, nil
}

func addAddr(l netlink.Link, s string) error {
	a, err := netlink.ParseAddr(s)
	if err != nil {
		return err
	}
	a.Flags = unix.IFA_F_NODAD
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("address %s: %w", s, err)
	}
	return nil
}

func family(ip string) int {
	if strings.Contains(ip, ":") {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func setForwarding(iface string, on bool) error {
	v := []byte("0")
	if on {
		v = []byte("1")
	}
	for _, f := range []string{"/proc/sys/net/ipv4/conf/" + iface + "/forwarding", "/proc/sys/net/ipv6/conf/" + iface + "/forwarding"} {
		if err := os.WriteFile(f, v, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// backendFrames makes n frames of every kind the backend program meets:
// GUE over IPv4 and IPv6 for this host, for another, and broken; inner
// TCP (SYN, ACK, of real connections, to a listener only, to nothing),
// UDP and ICMP, to the VIPs or elsewhere; hop lists naming next hops
// resolved, unresolved, out another interface, blackholed, unrouted and
// this host; and frames that are no GUE at all.
func backendFrames(rng *rand.Rand, n int, conns []netip.AddrPort) [][]byte {
	a := netip.MustParseAddr
	hops4 := []netip.Addr{a("10.77.0.10"), a("10.77.0.11"), a("10.99.0.7"), a("10.66.0.1"), a("172.31.0.1"), a("10.77.0.2"), a("10.10.10.10")}
	hops6 := []netip.Addr{a("fd00:77::10"), a("fd00:77::11"), a("fd00:99::7"), a("fd00:66::1"), a("2001:db8:31::1"), a("fd00:77::2"), a("fd00:10::10")}
	var frames [][]byte
	for len(frames) < n {
		v6outer := rng.IntN(3) == 0
		if rng.IntN(20) == 0 { // no GUE: a plain TCP segment, UDP to another port, ARP
			ip := pkt.IPv4(a("198.51.100.9"), a("10.10.10.10"), 6, pkt.TCP(1234, 80, 0x10, nil), pkt.V4Opts{})
			switch rng.IntN(3) {
			case 1:
				ip = pkt.IPv4(a("192.0.2.1"), a("10.77.0.2"), 17, pkt.UDP(1234, 19524, make([]byte, 40)), pkt.V4Opts{})
			case 2:
				frames = append(frames, pkt.Eth(pkt.DirectorMAC, pkt.GatewayMAC, 0, 0x0806, make([]byte, 28)))
				continue
			}
			frames = append(frames, pkt.Frame(ip))
			continue
		}
		v6inner := rng.IntN(2) == 0
		vip, client := a("10.10.10.10"), a("198.51.100.9")
		if v6inner {
			vip, client = a("fd00:10::10"), a("fd00:51::9")
		}
		if rng.IntN(10) == 0 {
			vip = a("203.0.113.9")
			if v6inner {
				vip = a("2001:db8:9::9")
			}
		}
		cport, vport := uint16(1024+rng.IntN(60000)), uint16(80)
		var inner []byte
		switch k := rng.IntN(10); {
		case k < 7:
			flags := byte(0x10)
			switch rng.IntN(20) {
			case 0, 1, 2, 3:
				flags = 0x02
			case 4:
				flags = 0x12
			}
			switch rng.IntN(10) {
			case 0, 1, 2: // a real connection's
				c := conns[rng.IntN(len(conns))]
				if c.Addr().Is4() == !v6inner {
					client, cport = c.Addr(), c.Port()
				}
			case 3, 4: // the listener's port
			default:
				vport = uint16(1 + rng.IntN(65535))
			}
			inner = ipOf(client, vip, 6, pkt.TCP(cport, vport, flags, nil))
		case k < 9:
			inner = ipOf(client, vip, 17, pkt.UDP(cport, 53, make([]byte, 20)))
		default:
			inner = ipOf(client, vip, 1, pkt.ICMP(8, 0, 1, nil))
		}
		outer, list := a("10.77.0.2"), hops4
		if v6outer {
			outer, list = a("fd00:77::2"), hops6
		}
		switch rng.IntN(20) {
		case 0: // for another host
			outer = outer.Next().Next().Next()
		case 1: // for another address of this host's
			outer = a("10.10.10.10")
			if v6outer {
				outer = a("fd00:10::10")
			}
		}
		hops := []netip.Addr{outer}
		// Up to seven listed: the longest chain, a row's earlier
		// primaries included.
		for i := rng.IntN(gue.MaxHops); i > 0; i-- {
			hops = append(hops, list[rng.IntN(len(list))])
		}
		next := uint8(rng.IntN(len(hops) + 1))
		h := gue.Header{Src: a("192.0.2.1"), Hops: hops, SourcePort: 0x8123, NextHop: next, Proto: gue.ProtoIPv4}
		etype := uint16(0x0800)
		if v6outer {
			h.Src, etype = a("2001:db8::1"), 0x86dd
		}
		if rng.IntN(15) == 0 { // from a source not trusted: spoofed
			h.Src = a("203.0.113.77")
			if v6outer {
				h.Src = a("2001:db8:77::7")
			}
		}
		if v6inner {
			h.Proto = gue.ProtoIPv6
		}
		f := h.Append(pkt.Eth(pkt.DirectorMAC, pkt.GatewayMAC, 0, etype, nil), len(inner))
		f = append(f, inner...)
		g := 14 + 20 + 8
		if v6outer {
			g = 14 + 40 + 8
		}
		switch rng.IntN(40) { // broken
		case 0:
			f[g] |= 0x40 // GUE version 1
		case 1:
			f[g+1] = 17 // inner protocol
		case 2:
			f[g+5] ^= 1 // private data type
		case 3:
			f = f[:g+4+rng.IntN(len(f)-g-4)] // cut short
		}
		frames = append(frames, f)
	}
	return frames
}

func ipOf(src, dst netip.Addr, proto uint8, l4 []byte) []byte {
	if src.Is4() {
		return pkt.IPv4(src, dst, proto, l4, pkt.V4Opts{})
	}
	if proto == 1 {
		proto, l4 = 58, pkt.ICMPv6(src, dst, 128, 0, 1, nil)
	}
	return pkt.IPv6(src, dst, proto, l4)
}

// TestBackendExplainMatchesTheKernel: what backend explain predicts for
// each of 10,000 generated packets is what the backend program does with
// it, run in the kernel as if it came in by be0: the counter that says
// why and the verdict. With forwarding on, then off, then second chance
// off, then nobody trusted; spoofed sources and untrusted next hops
// among the packets (issue 46, item 6).
func TestBackendExplainMatchesTheKernel(t *testing.T) {
	backendRig(t, func(b []string) error {
		lab0, err := newBackendLab(max(testenv.Reduced(40), 4))
		if err != nil {
			return err
		}
		defer lab0.close()
		// Attach configures the program; detached again, it counts only
		// the frames run here, not the neighbour discovery be1 sends.
		runAttach := func(extra ...string) error {
			if out, errOut, code := runCmd(append(append(b, "attach", "be0", "--mode", "generic"), extra...)...); code != 0 {
				return fmt.Errorf("attach: %s %s", out, errOut)
			}
			if out, errOut, code := runCmd(append(b, "detach", "be0")...); code != 0 {
				return fmt.Errorf("detach: %s %s", out, errOut)
			}
			return nil
		}
		// The director and the backends' networks, 10.99/16 among them,
		// which have no route; 10.66.0.0, 172.31.0.0 and their IPv6
		// ones not trusted.
		trust := []string{"--trust", "192.0.2.1,2001:db8::1,10.77.0.0/24,fd00:77::/64,10.88.0.0/24,fd00:88::/64,10.99.0.0/16,fd00:99::/32"}
		if err := runAttach(trust...); err != nil {
			return err
		}
		prog, err := loader.OpenBackend(b[2])
		if err != nil {
			return err
		}
		defer prog.Close()
		release, err := testrun.Hold(prog.Prog())
		if err != nil {
			return err
		}
		defer release()
		// Where BPF_PROG_RUN takes no ingress interface (before 5.13),
		// frames come in by loopback: explain is asked the same.
		ingress, run := "be0", func(f []byte, ifindex int) (uint32, error) {
			v, _, err := testrun.RunOn(prog.Prog(), f, ifindex)
			return v, err
		}
		if !testrun.HaveRunContext() {
			ingress, run = "lo", func(f []byte, _ int) (uint32, error) {
				v, _, err := testrun.Run(prog.Prog(), f)
				return v, err
			}
		}
		ifi, err := net.InterfaceByName(ingress)
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(5, 39))
		total := testenv.Reduced(10000)
		seen := map[string]int{}
		for _, phase := range []struct {
			name  string
			share int
			setup func() error
		}{
			// Forwarding on where frames come in: be0, or loopback
			// where BPF_PROG_RUN takes no ingress interface (5.10).
			{"second chance", 7, func() error { return setForwarding(ingress, true) }},
			{"forwarding off", 1, func() error { return setForwarding(ingress, false) }},
			{"no second chance", 1, func() error { setForwarding(ingress, true); return runAttach(append(trust, "--no-second-chance")...) }},
			{"nobody trusted", 1, func() error { return runAttach() }},
		} {
			if err := phase.setup(); err != nil {
				return err
			}
			host, err := prog.Host(ingress)
			if err != nil {
				return err
			}
			for i, f := range backendFrames(rng, total*phase.share/10, lab0.conns) {
				x := explain.ExplainBackend(host.Config, host, f)
				if host.Err != nil {
					return fmt.Errorf("%s: a lookup failed: %w", phase.name, host.Err)
				}
				before, err := prog.Counters()
				if err != nil {
					return err
				}
				v, err := run(f, ifi.Index)
				if err != nil {
					return err
				}
				after, _ := prog.Counters()
				var moved []string
				for name, n := range after {
					if n != before[name] && name != "processed" && name != "gue6" && name != "second_chance_in" {
						moved = append(moved, name)
					}
				}
				gue6 := after["gue6"] != before["gue6"]
				sc := after["second_chance_in"] != before["second_chance_in"]
				if len(moved) != 1 || moved[0] != x.Counter || verdictName(v) != x.Verdict || gue6 != (x.Outer != "" && strings.Contains(x.Outer, ":")) ||
					sc != x.SecondChanceIn {
					return fmt.Errorf("%s, packet %d (%s): explain says %s %s (%s; second chance in %v), the kernel %s %v (gue6 %v, second chance in %v)", phase.name, i, x.Packet,
						x.Verdict, x.Counter, x.Why, x.SecondChanceIn, verdictName(v), moved, gue6, sc)
				}
				seen[x.Counter]++
				if sc {
					seen["second_chance_in"]++
				}
			}
		}
		t.Logf("%d packets: %v", total, seen)
		want := []string{"second_chance_in", "decap_syn", "decap_known", "decap_not_tcp", "decap_last_hop", "forwarded_stack", "pass_not_gue",
			"drop_malformed", "drop_no_route", "drop_not_local", "drop_untrusted", "drop_untrusted_hop"}
		if testrun.HaveRunContext() {
			want = append(want, "forwarded")
		}
		for _, w := range want {
			if seen[w] == 0 {
				t.Errorf("no packet was counted as %s: the traffic does not test explain there", w)
			}
		}
		return nil
	})
}

func verdictName(v uint32) string {
	switch int(v) {
	case model.XDPPass:
		return "XDP_PASS"
	case model.XDPTX:
		return "XDP_TX"
	case model.XDPDrop:
		return "XDP_DROP"
	}
	return fmt.Sprintf("XDP action %d", v)
}

// TestBackendExplainCommand: backend explain's report of a SYN, a packet of
// an unknown connection sent on to a resolved next hop, and one whose next
// hop is unresolved; its JSON; its errors.
func TestBackendExplainCommand(t *testing.T) {
	backendRig(t, func(b []string) error {
		l, err := newBackendLab(1)
		if err != nil {
			return err
		}
		defer l.close()
		if _, errOut, code := runCmd(append(b, "explain", "tcp", "198.51.100.9:4000", "10.10.10.10:80")...); code != 1 || !strings.Contains(errOut, "no backend program is loaded") {
			return fmt.Errorf("before attach: %d %s", code, errOut)
		}
		if out, errOut, code := runCmd(append(b, "attach", "be0", "--mode", "generic", "--trust", "192.0.2.0/24,10.77.0.0/24,172.31.0.0/16")...); code != 0 {
			return fmt.Errorf("attach: %s %s", out, errOut)
		}
		for _, c := range []struct {
			args []string
			want []string
		}{
			// Issue 46, item 6: from a source not trusted, or to a next
			// hop not trusted.
			{[]string{"tcp", "198.51.100.9:4000", "10.10.10.10:80", "--syn", "--from", "203.0.113.9"},
				[]string{"ipv4 203.0.113.9 > 10.77.0.2", "drop (XDP_DROP, counted as drop_untrusted): GUE from 203.0.113.9, not a director or backend this host trusts"}},
			{[]string{"tcp", "198.51.100.9:4000", "10.10.10.10:81", "--hops", "198.18.5.5"},
				[]string{"ipv4 10.77.0.0 > 10.77.0.2", "next hop  198.18.5.5: not trusted, so not looked up", "drop (XDP_DROP, counted as drop_untrusted_hop)", "the next hop 198.18.5.5 is not a director or backend this host trusts"}},
			{[]string{"tcp", "198.51.100.9:4000", "10.10.10.10:80", "--syn"}, []string{"decapsulate (XDP_PASS, counted as decap_syn): a TCP SYN"}},
			{[]string{"tcp", "198.51.100.9:4000", "10.10.10.10:80", "--hops", "10.77.0.10"},
				[]string{"socket    listener only", "next hop  10.77.0.10: out be0 to 10.77.0.10, its neighbour resolved (02:00:00:00:77:10, permanent)",
					"forward (XDP_TX, counted as forwarded)"}},
			{[]string{"tcp", "198.51.100.9:4000", "10.10.10.10:81", "--hops", "10.77.0.11"},
				[]string{"socket    none", "whose neighbour entry is not resolved", "counted as forwarded_stack"}},
			{[]string{"tcp", l.conns[0].String(), "10.10.10.10:80", "--hops", "10.77.0.11"}, []string{"socket    connection", "counted as decap_known"}},
			{[]string{"udp", "198.51.100.9:4000", "203.0.113.1:53"}, []string{"counted as drop_not_local", "Put the VIP (or its prefix) on lo"}},
			{[]string{"tcp", "198.51.100.9:4000", "10.10.10.10:81", "--hops", "172.31.0.1"}, []string{"drop (XDP_DROP, counted as drop_no_route)", "no route to 172.31.0.1"}},
		} {
			out, errOut, code := runCmd(append(append(b, "explain"), c.args...)...)
			for _, w := range c.want {
				if code != 0 || !strings.Contains(out, w) {
					return fmt.Errorf("backend explain %s: exit %d, want %q in\n%s%s", strings.Join(c.args, " "), code, w, out, errOut)
				}
			}
		}
		out, _, code := runCmd(append(b, "explain", "tcp", "198.51.100.9:4000", "10.10.10.10:80", "--hops", "10.77.0.10", "--json")...)
		var x explain.Backend
		if err := json.Unmarshal([]byte(out), &x); code != 0 || err != nil || x.Counter != "forwarded" || x.NextHop != "10.77.0.10" || x.Socket != "listener only" {
			return fmt.Errorf("--json: %d %v %s", code, err, out)
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"tcp", "198.51.100.9:4000", "10.10.10.10:80", "--hops", "fd00::1"}, "is not of the outer destination 10.77.0.2's family"},
			{[]string{"tcp", "198.51.100.9:4000", "10.10.10.10:80", "--hops", "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.6,10.0.0.7,10.0.0.8"}, "at most 7 hops"},
			{[]string{"--pcap", capDir + "small.pcap", "--syn"}, "do not go with --pcap"},
			{[]string{"tcp", "198.51.100.9:4000", "10.10.10.10:80", "--from", "fd00::1"}, "--from: fd00::1 is not of the outer destination 10.77.0.2's family"},
			{[]string{"tcp", "198.51.100.9:4000", "10.10.10.10:80", "--interface", "nope0"}, "nope0"},
		} {
			if _, errOut, code := runCmd(append(append(b, "explain"), c.args...)...); code != 1 || !strings.Contains(errOut, c.want) {
				return fmt.Errorf("backend explain %s: exit %d, %q; want %q", strings.Join(c.args, " "), code, errOut, c.want)
			}
		}
		return nil
	})
}
