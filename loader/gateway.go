package loader

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/table"
)

// ResolveGateway returns c with its gateway MAC set: the config's own, or
// else the neighbour entry of the gateway of the default route through
// c.OutboundInterface: the default IPv4 route's, or for a config with an
// IPv6 source only (outbound_src_ip6 without outbound_src_ip), its
// outbound_gateway_mac6 or else the default IPv6 route's. It never guesses from whatever default route the
// namespace it runs in has: without an interface named, an absent MAC is
// an error.
func ResolveGateway(c *table.DirectorConfig) (*table.DirectorConfig, error) {
	r := *c
	if c.GatewayMAC != nil {
		return &r, nil
	}
	if !c.SrcIP.IsValid() && c.SrcIP6.IsValid() && c.GatewayMAC6 != nil {
		// IPv6 only: its gateway is the one next hop there is (held as
		// GatewayMAC, which Gateway6 falls back to, as the kernel's
		// config reads back).
		r.GatewayMAC, r.GatewayMAC6 = c.GatewayMAC6, nil
		return &r, nil
	}
	if c.OutboundInterface == "" {
		if !c.SrcIP.IsValid() && c.SrcIP6.IsValid() {
			return nil, fmt.Errorf("outbound_gateway_mac6 is not set: set it, or set outbound_interface to resolve it from that interface's default IPv6 route")
		}
		return nil, fmt.Errorf("outbound_gateway_mac is not set: set it, or set outbound_interface to resolve it from that interface's default route")
	}
	l, err := netlink.LinkByName(c.OutboundInterface)
	if err != nil {
		return nil, fmt.Errorf("outbound_interface %s: %w (in this network namespace)", c.OutboundInterface, err)
	}
	family, name := unix.AF_INET, "IPv4"
	if !c.SrcIP.IsValid() && c.SrcIP6.IsValid() {
		family, name = unix.AF_INET6, "IPv6"
	}
	if r.GatewayMAC, err = gatewayMAC(l, family, name, c.OutboundInterface); err != nil {
		return nil, err
	}
	return &r, nil
}

// gatewayMAC is the MAC of the gateway of l's default route of family,
// from l's neighbour table.
func gatewayMAC(l netlink.Link, family int, name, iface string) (net.HardwareAddr, error) {
	routes, err := dumped(func() ([]netlink.Route, error) { return netlink.RouteList(l, family) })
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	for _, rt := range routes {
		if (rt.Dst != nil && !isDefault(rt.Dst)) || rt.Gw == nil {
			continue
		}
		neighs, err := netlink.NeighList(l.Attrs().Index, family)
		if err != nil {
			return nil, fmt.Errorf("listing neighbours: %w", err)
		}
		for _, n := range neighs {
			if n.IP.Equal(rt.Gw) && len(n.HardwareAddr) == 6 && n.State&(unix.NUD_FAILED|unix.NUD_INCOMPLETE) == 0 {
				return n.HardwareAddr, nil
			}
		}
		return nil, fmt.Errorf("the default gateway %s of %s has no neighbour entry: set outbound_gateway_mac, or reach the gateway once so the kernel resolves it", rt.Gw, iface)
	}
	return nil, fmt.Errorf("outbound_gateway_mac is not set and %s has no default %s route to take the gateway from", iface, name)
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

// Source is one of a director config's outbound sources, and the
// interface of this host (in this network namespace) that has it: none
// when no interface does.
type Source struct {
	Setting string // outbound_src_ip or outbound_src_ip6
	Addr    netip.Addr
	Iface   string
}

// NotHere says what a source no interface has means, for plan, apply and
// doctor alike.
func (s Source) NotHere() string {
	return fmt.Sprintf("%s %s is not an address of this host: backends answer it, and what they send it never comes back here", s.Setting, s.Addr)
}

// Sources are c's outbound sources, each with the interface that has it.
func Sources(c *table.DirectorConfig) ([]Source, error) {
	addrs, err := dumped(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, unix.AF_UNSPEC) })
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	var out []Source
	for _, s := range []Source{{Setting: "outbound_src_ip", Addr: c.SrcIP}, {Setting: "outbound_src_ip6", Addr: c.SrcIP6}} {
		if !s.Addr.IsValid() {
			continue
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == s.Addr {
				s.Iface = fmt.Sprint(a.LinkIndex)
				if ifi, err := net.InterfaceByIndex(a.LinkIndex); err == nil {
					s.Iface = ifi.Name
				}
				break
			}
		}
		out = append(out, s)
	}
	return out, nil
}
