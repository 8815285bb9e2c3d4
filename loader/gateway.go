package loader

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/table"
)

// ResolveGateway returns c with its gateway MAC set: the config's own, or
// else the neighbour entry of the gateway of the default IPv4 route
// through c.OutboundInterface. It never guesses from whatever default
// route the namespace it runs in has: without an interface named, an
// absent MAC is an error.
func ResolveGateway(c *table.DirectorConfig) (*table.DirectorConfig, error) {
	r := *c
	if c.GatewayMAC != nil {
		return &r, nil
	}
	if c.OutboundInterface == "" {
		return nil, fmt.Errorf("outbound_gateway_mac is not set: set it, or set outbound_interface to resolve it from that interface's default route")
	}
	l, err := netlink.LinkByName(c.OutboundInterface)
	if err != nil {
		return nil, fmt.Errorf("outbound_interface %s: %w (in this network namespace)", c.OutboundInterface, err)
	}
	routes, err := netlink.RouteList(l, unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	for _, rt := range routes {
		if (rt.Dst != nil && !isDefault(rt.Dst)) || rt.Gw == nil {
			continue
		}
		neighs, err := netlink.NeighList(l.Attrs().Index, unix.AF_INET)
		if err != nil {
			return nil, fmt.Errorf("listing neighbours: %w", err)
		}
		for _, n := range neighs {
			if n.IP.Equal(rt.Gw) && len(n.HardwareAddr) == 6 && n.State&(unix.NUD_FAILED|unix.NUD_INCOMPLETE) == 0 {
				r.GatewayMAC = n.HardwareAddr
				return &r, nil
			}
		}
		return nil, fmt.Errorf("the default gateway %s of %s has no neighbour entry: set outbound_gateway_mac, or reach the gateway once so the kernel resolves it", rt.Gw, c.OutboundInterface)
	}
	return nil, fmt.Errorf("outbound_gateway_mac is not set and %s has no default IPv4 route to take the gateway from", c.OutboundInterface)
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}
