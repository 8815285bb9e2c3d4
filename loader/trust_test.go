package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

// TestSpoofedGUENeverSentOn (issue 46, item 6): through real veths, GUE
// from a source the backend does not trust, or to a next hop it does not
// trust, never leaves it, by either way second chance sends: XDP_TX (the
// next hop's neighbour resolved) or the kernel's forwarding (unresolved).
// The same packets from a trusted source to a trusted hop do leave, by
// each way: the control that shows the peer would have seen them.
func TestSpoofedGUENeverSentOn(t *testing.T) {
	testenv.Kernel(t)
	dir := testDir(t)
	peer, err := testrun.NewNetns()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	err = testrun.InNetns(func() error {
		if err := testrun.Veth("tr0", "tr1"); err != nil {
			return err
		}
		tr0, _ := netlink.LinkByName("tr0")
		tr1, _ := netlink.LinkByName("tr1")
		if err := netlink.LinkSetNsFd(tr1, int(peer)); err != nil {
			return err
		}
		lo, _ := netlink.LinkByName("lo")
		netlink.LinkSetUp(lo)
		for _, ad := range []struct {
			l netlink.Link
			a string
		}{{tr0, "192.168.77.1/24"}, {lo, "10.10.10.10/32"}} {
			addr, _ := netlink.ParseAddr(ad.a)
			if err := netlink.AddrAdd(ad.l, addr); err != nil {
				return err
			}
		}
		for _, k := range []string{"net/ipv4/conf/all/forwarding", "net/ipv4/conf/all/rp_filter", "net/ipv4/conf/tr0/rp_filter"} {
			v := "0"
			if k == "net/ipv4/conf/all/forwarding" {
				v = "1"
			}
			if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
				return err
			}
		}
		// The peer: the next hops .2 and .3 on one interface.
		var peerMAC net.HardwareAddr
		var sock *testrun.Socket
		if err := testrun.Do(peer, func() error {
			l, err := netlink.LinkByName("tr1")
			if err != nil {
				return err
			}
			netlink.LinkSetUp(l)
			for _, s := range []string{"192.168.77.2/24", "192.168.77.3/24"} {
				addr, _ := netlink.ParseAddr(s)
				if err := netlink.AddrAdd(l, addr); err != nil {
					return err
				}
			}
			peerMAC = l.Attrs().HardwareAddr
			sock, err = testrun.Listen("tr1")
			return err
		}); err != nil {
			return err
		}
		defer sock.Close()
		// .2 resolved (XDP_TX); .3 not (the kernel resolves and forwards).
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: tr0.Attrs().Index, IP: net.ParseIP("192.168.77.2"), HardwareAddr: peerMAC,
			State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}); err != nil {
			return err
		}
		// A route the untrusted hop would be sent by, were it not refused.
		_, far, _ := net.ParseCIDR("198.18.0.0/15")
		if err := netlink.RouteAdd(&netlink.Route{Dst: far, Gw: net.ParseIP("192.168.77.2"), LinkIndex: tr0.Attrs().Index}); err != nil {
			return err
		}

		b, err := LoadBackend(dir)
		if err != nil {
			return err
		}
		defer b.Close()
		if _, _, err := b.Setup(BackendSetup{Iface: "tr0", Mode: ModeGeneric, SecondChance: true,
			Trust: []netip.Prefix{pf("192.0.2.1/32"), pf("192.168.77.0/24")}}); err != nil {
			return err
		}
		defer b.Detach("tr0")

		ourMAC := tr0.Attrs().HardwareAddr
		frame := func(src, hop netip.Addr) []byte {
			inner := pkt.IPv4(a("198.51.100.9"), a("10.10.10.10"), 6, pkt.TCP(4000, 80, 0x10, []byte("x")), pkt.V4Opts{})
			h := gue.Header{Src: src, Hops: []netip.Addr{a("192.168.77.1"), hop}, SourcePort: 0x8123, Proto: gue.ProtoIPv4}
			f := pkt.Eth([6]byte(ourMAC), [6]byte(peerMAC), 0, 0x0800, nil)
			f = h.Append(f, len(inner))
			return append(f, inner...)
		}
		// sentOn says whether GUE to hop (outer destination) came out of
		// tr0 within a second of f being sent in.
		sentOn := func(f []byte, hop netip.Addr) (bool, error) {
			if err := sock.Send(f); err != nil {
				return false, err
			}
			_, err := sock.Recv(time.Second, func(r []byte) bool {
				return len(r) >= 14+28 && binary.BigEndian.Uint16(r[12:]) == 0x0800 && r[14+9] == 17 &&
					netip.AddrFrom4([4]byte(r[14+16:14+20])) == hop && binary.BigEndian.Uint16(r[14+22:]) == abi.GUEPort
			})
			if errors.Is(err, testrun.ErrTimeout) {
				return false, nil
			}
			return err == nil, err
		}
		director, spoofer := a("192.0.2.1"), a("203.0.113.9")
		resolved, unresolved, untrusted := a("192.168.77.2"), a("192.168.77.3"), a("198.18.5.5")
		for _, c := range []struct {
			name     string
			src, hop netip.Addr
			counter  string
			sent     bool
		}{
			{"trusted, by XDP_TX", director, resolved, "forwarded", true},
			{"spoofed, resolved hop", spoofer, resolved, "drop_untrusted", false},
			{"spoofed, unresolved hop", spoofer, unresolved, "drop_untrusted", false},
			{"untrusted hop", director, untrusted, "drop_untrusted_hop", false},
			{"trusted, by the kernel", director, unresolved, "forwarded_stack", true},
		} {
			before, err := b.Counters()
			if err != nil {
				return err
			}
			sent, err := sentOn(frame(c.src, c.hop), c.hop)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			after, _ := b.Counters()
			if sent != c.sent || after[c.counter] != before[c.counter]+1 {
				return fmt.Errorf("%s: sent on %v (want %v); %s %d -> %d (counters %v -> %v)", c.name, sent, c.sent, c.counter,
					before[c.counter], after[c.counter], before, after)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
