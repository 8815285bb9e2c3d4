package loader

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/table"
)

// TestResolveGatewayOfNamedInterface resolves the gateway in a private
// namespace, only ever through the interface the config names: the
// namespace's own default route is never a fallback.
func TestResolveGatewayOfNamedInterface(t *testing.T) {
	testenv.Kernel(t)
	err := testrun.InNetns(func() error {
		dc := table.DefaultDirectorConfig()
		if err := testrun.Veth("gw0", "gw1"); err != nil {
			return err
		}
		if err := testrun.Veth("other0", "other1"); err != nil {
			return err
		}
		mac, _ := net.ParseMAC("02:00:00:00:00:09")
		gw := net.ParseIP("192.0.2.254")
		for _, n := range []string{"gw0", "other0"} {
			l, err := netlink.LinkByName(n)
			if err != nil {
				return err
			}
			a := "192.0.2.1/24"
			if n == "other0" {
				a, gw = "198.51.100.1/24", net.ParseIP("198.51.100.254")
			}
			addr, _ := netlink.ParseAddr(a)
			if err := netlink.AddrAdd(l, addr); err != nil {
				return err
			}
			if n == "other0" { // the namespace's default route, through the other interface
				if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw}); err != nil {
					return err
				}
				if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: l.Attrs().Index, IP: gw, HardwareAddr: mac, State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}); err != nil {
					return err
				}
			}
		}
		// No interface named: the namespace's default route is not used.
		if _, err := ResolveGateway(&dc); err == nil || !strings.Contains(err.Error(), "set outbound_interface") {
			return fmt.Errorf("without an interface: %v", err)
		}
		dc.OutboundInterface = "nosuch0"
		if _, err := ResolveGateway(&dc); err == nil || !strings.Contains(err.Error(), "outbound_interface nosuch0") {
			return fmt.Errorf("a missing interface: %v", err)
		}
		dc.OutboundInterface = "gw0"
		if _, err := ResolveGateway(&dc); err == nil || !strings.Contains(err.Error(), "gw0 has no default IPv4 route") {
			return fmt.Errorf("without a route on gw0: %v", err)
		}
		l, _ := netlink.LinkByName("gw0")
		gw = net.ParseIP("192.0.2.254")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw, Priority: 10}); err != nil {
			return err
		}
		if _, err := ResolveGateway(&dc); err == nil || !strings.Contains(err.Error(), "no neighbour entry") {
			return fmt.Errorf("without a neighbour: %v", err)
		}
		mac2, _ := net.ParseMAC("02:00:00:00:00:0b")
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: l.Attrs().Index, IP: gw, HardwareAddr: mac2, State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}); err != nil {
			return err
		}
		got, err := ResolveGateway(&dc)
		if err != nil || got.GatewayMAC.String() != mac2.String() {
			return fmt.Errorf("resolved %v, %v; want %v", got, err, mac2)
		}
		// A config with an IPv6 source only takes the default IPv6
		// route's gateway, a link-local address, from the neighbours.
		v6 := dc
		v6.SrcIP, v6.SrcIP6 = netip.Addr{}, netip.MustParseAddr("2001:db8::1")
		if _, err := ResolveGateway(&v6); err == nil || !strings.Contains(err.Error(), "gw0 has no default IPv6 route") {
			return fmt.Errorf("IPv6 only, without an IPv6 route on gw0: %v", err)
		}
		gw6 := net.ParseIP("fe80::1")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw6, Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}); err != nil {
			return fmt.Errorf("IPv6 default route: %w", err)
		}
		mac6, _ := net.ParseMAC("02:00:00:00:00:66")
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: l.Attrs().Index, IP: gw6, HardwareAddr: mac6, State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V6}); err != nil {
			return err
		}
		if got, err := ResolveGateway(&v6); err != nil || got.GatewayMAC.String() != mac6.String() {
			return fmt.Errorf("IPv6 only: resolved %v, %v; want %v", got, err, mac6)
		}
		// A MAC in the config wins.
		dc.GatewayMAC, _ = net.ParseMAC("02:00:00:00:00:0a")
		if got, _ := ResolveGateway(&dc); got.GatewayMAC.String() != "02:00:00:00:00:0a" {
			return fmt.Errorf("configured MAC ignored: %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
