package loader

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

// The director config lives in the one entry of the config map, beside
// the live bind generation: an apply that changes it writes it in the
// same map update that flips the generation, so packets see the old
// settings with the old tables or the new with the new.

// configEntry lays c out as the datapath reads it, with bind generation
// gen. c's gateway must be resolved.
func configEntry(c *table.DirectorConfig, gen uint32) (*abi.Config, error) {
	if len(c.GatewayMAC) != 6 {
		return nil, fmt.Errorf("gateway MAC %q is not an Ethernet address", c.GatewayMAC)
	}
	if c.SrcIP.IsValid() && !c.SrcIP.Is4() {
		return nil, fmt.Errorf("outbound source %s is not IPv4", c.SrcIP)
	}
	if c.SrcIP6.IsValid() && (!c.SrcIP6.Is6() || c.SrcIP6.Is4In6()) {
		return nil, fmt.Errorf("outbound IPv6 source %s is not IPv6", c.SrcIP6)
	}
	if !c.SrcIP.IsValid() && !c.SrcIP6.IsValid() {
		return nil, errors.New("no outbound source: outbound_src_ip or outbound_src_ip6 is required")
	}
	if c.GatewayMAC6 != nil && len(c.GatewayMAC6) != 6 {
		return nil, fmt.Errorf("IPv6 gateway MAC %q is not an Ethernet address", c.GatewayMAC6)
	}
	v := &abi.Config{
		HashFields: uint8(c.HashFields), AltHashFields: uint8(c.AltHashFields), Configured: 1, BindGen: gen,
	}
	if c.SrcIP.IsValid() {
		v.SrcIp = mapimage.NativeFromBE(c.SrcIP.As4())
	}
	v.CsumBase = csumBase(v.SrcIp)
	copy(v.GatewayMac[:], c.GatewayMAC)
	copy(v.GatewayMac6[:], c.GatewayMAC)
	if c.GatewayMAC6 != nil {
		copy(v.GatewayMac6[:], c.GatewayMAC6)
	}
	if c.SrcIP6.IsValid() {
		v.SrcIp6 = c.SrcIP6.As16()
	}
	if c.ForwardICMPEcho {
		v.ForwardIcmpEcho = 1
	}
	if c.OutboundMTU != 0 && (c.OutboundMTU < 1280 || c.OutboundMTU > 65535) {
		return nil, fmt.Errorf("outbound MTU %d is not from 1280 to 65535", c.OutboundMTU)
	}
	v.OutboundMtu = uint16(c.OutboundMTU)
	return v, nil
}

// SetConfig writes the director's own settings at once, outside an apply:
// for private instances (replays, tests), which no reviewed change
// concerns. A pinned director's settings change through Commit.
func (d *Director) SetConfig(c *table.DirectorConfig, gateway net.HardwareAddr) error {
	if d.Dir != "" {
		return errors.New("a pinned director's config changes only through an apply")
	}
	r := *c
	r.GatewayMAC = gateway
	var v abi.Config
	if err := d.Maps.Config.Lookup(uint32(0), &v); err != nil {
		return err
	}
	e, err := configEntry(&r, v.BindGen) // the generation is Apply's
	if err != nil {
		return err
	}
	return d.Maps.Config.Put(uint32(0), e)
}

// csumBase is dir_config.csum_base: the one's complement sum, unfolded, of
// the outer IPv4 header's constant words (version and IHL, DF, TTL and
// protocol UDP) and the source address, in the byte order the program
// reads them.
func csumBase(src uint32) uint32 {
	// The words as the program's little-endian stores lay them: version
	// and IHL (TOS 0), DF (network order), TTL and protocol.
	const (
		verIHL = uint32(abi.IPv4VersionIHL)
		df     = uint32(abi.IPv4DF)>>8 | uint32(abi.IPv4DF)<<8&0xff00
		ttl    = uint32(abi.IPv4TTL) | uint32(abi.IPv4Proto)<<8
	)
	return verIHL + df + ttl + src&0xffff + src>>16
}

// refreshConfig rederives what the program reads from the config entry
// but the control plane computes (csum_base), for an entry an older
// version wrote; a new program must not read it stale.
func (d *Director) refreshConfig() error {
	var v abi.Config
	if err := d.Maps.Config.Lookup(uint32(0), &v); err != nil {
		return err
	}
	if v.Configured == 0 || v.CsumBase == csumBase(v.SrcIp) {
		return nil
	}
	v.CsumBase = csumBase(v.SrcIp)
	return d.Maps.Config.Put(uint32(0), &v)
}

// LiveConfig reads the director's settings back, their gateway MAC set;
// nil before any were written.
func (d *Director) LiveConfig() (*table.DirectorConfig, error) {
	var v abi.Config
	if err := d.Maps.Config.Lookup(uint32(0), &v); err != nil {
		return nil, err
	}
	return decodeConfig(&v), nil
}

func decodeConfig(v *abi.Config) *table.DirectorConfig {
	if v.Configured == 0 {
		return nil
	}
	c := &table.DirectorConfig{HashFields: table.HashFields(v.HashFields), AltHashFields: table.HashFields(v.AltHashFields),
		ForwardICMPEcho: v.ForwardIcmpEcho == 1, GatewayMAC: append(net.HardwareAddr(nil), v.GatewayMac[:]...),
		OutboundMTU: int(v.OutboundMtu)}
	if v.SrcIp != 0 {
		c.SrcIP = addrFromNative(v.SrcIp)
	}
	if a := netip.AddrFrom16(v.SrcIp6); !a.IsUnspecified() {
		c.SrcIP6 = a
	}
	if v.GatewayMac6 != v.GatewayMac {
		c.GatewayMAC6 = append(net.HardwareAddr(nil), v.GatewayMac6[:]...)
	}
	return c
}

// addrFromNative is nativeFromBE's inverse.
func addrFromNative(b uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(b), byte(b >> 8), byte(b >> 16), byte(b >> 24)})
}
