package loader

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/table"
)

// GatewayMAC returns the MAC encapsulated packets are sent to: the
// config's, or else the neighbour entry of the default IPv4 route's gateway.
func GatewayMAC(c *table.DirectorConfig) (net.HardwareAddr, error) {
	if c.GatewayMAC != nil {
		return c.GatewayMAC, nil
	}
	routes, err := netlink.RouteList(nil, unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	for _, r := range routes {
		if (r.Dst != nil && !isDefault(r.Dst)) || r.Gw == nil {
			continue
		}
		neighs, err := netlink.NeighList(r.LinkIndex, unix.AF_INET)
		if err != nil {
			return nil, fmt.Errorf("listing neighbours: %w", err)
		}
		for _, n := range neighs {
			if n.IP.Equal(r.Gw) && len(n.HardwareAddr) == 6 && n.State&(unix.NUD_FAILED|unix.NUD_INCOMPLETE) == 0 {
				return n.HardwareAddr, nil
			}
		}
		return nil, fmt.Errorf("the default gateway %s has no neighbour entry: set outbound_gateway_mac, or reach the gateway once so the kernel resolves it", r.Gw)
	}
	return nil, fmt.Errorf("outbound_gateway_mac is not set and there is no default IPv4 route to take the gateway from")
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}
