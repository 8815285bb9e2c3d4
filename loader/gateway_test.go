package loader

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/director/director/internal/testnet"
	"github.com/director/director/table"
)

// TestGatewayMACFromDefaultRoute resolves the gateway in a private
// namespace with its own default route and neighbour entry.
func TestGatewayMACFromDefaultRoute(t *testing.T) {
	err := testnet.InNetns(func() error {
		dc := table.DefaultDirectorConfig()
		if _, err := GatewayMAC(&dc); err == nil || !strings.Contains(err.Error(), "no default IPv4 route") {
			return fmt.Errorf("without a route: %v", err)
		}
		if err := testnet.Veth("gw0", "gw1"); err != nil {
			return err
		}
		l, err := netlink.LinkByName("gw0")
		if err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("192.0.2.1/24")
		if err := netlink.AddrAdd(l, addr); err != nil {
			return err
		}
		gw := net.ParseIP("192.0.2.254")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw}); err != nil {
			return err
		}
		if _, err := GatewayMAC(&dc); err == nil || !strings.Contains(err.Error(), "no neighbour entry") {
			return fmt.Errorf("without a neighbour: %v", err)
		}
		mac, _ := net.ParseMAC("02:00:00:00:00:09")
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: l.Attrs().Index, IP: gw, HardwareAddr: mac, State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}); err != nil {
			return err
		}
		got, err := GatewayMAC(&dc)
		if err != nil || got.String() != mac.String() {
			return fmt.Errorf("resolved %v, %v; want %v", got, err, mac)
		}
		// A MAC in the config wins.
		dc.GatewayMAC, _ = net.ParseMAC("02:00:00:00:00:0a")
		if got, _ := GatewayMAC(&dc); got.String() != "02:00:00:00:00:0a" {
			return fmt.Errorf("configured MAC ignored: %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
