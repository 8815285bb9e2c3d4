package table

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// HashFields selects the packet fields that feed the flow hash, in GLB's
// fixed order: source address, destination address, source port,
// destination port. The bit values are the datapath's.
type HashFields uint8

const (
	HashSrcAddr HashFields = 1
	HashDstAddr HashFields = 2
	HashSrcPort HashFields = 4
	HashDstPort HashFields = 8
)

func (h HashFields) String() string {
	var parts []string
	for _, f := range []struct {
		bit  HashFields
		name string
	}{{HashSrcAddr, "src_addr"}, {HashDstAddr, "dst_addr"}, {HashSrcPort, "src_port"}, {HashDstPort, "dst_port"}} {
		if h&f.bit != 0 {
			parts = append(parts, f.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// DirectorConfig is the director's own settings, in GLB's director.conf
// format.
type DirectorConfig struct {
	// GatewayMAC is the next hop for encapsulated packets; nil when the
	// file leaves it out (then it is resolved from OutboundInterface).
	GatewayMAC net.HardwareAddr
	// OutboundInterface is the interface GUE packets leave by; when
	// GatewayMAC is absent, the gateway of its default route is resolved
	// through its neighbour table. A director extension to GLB's format.
	OutboundInterface string
	SrcIP             netip.Addr // outer IPv4 source; invalid when only SrcIP6 is given
	// SrcIP6 is the outer IPv6 source, for tables of IPv6 backends
	// (director's extension, outbound_src_ip6); invalid when none.
	SrcIP6 netip.Addr
	// GatewayMAC6 is the next hop of GUE over IPv6, when it differs from
	// GatewayMAC (outbound_gateway_mac6); nil: GatewayMAC.
	GatewayMAC6 net.HardwareAddr
	// OutboundMTU is the largest packet the underlay carries, when
	// smaller than the interface's MTU (outbound_mtu, 1280-65535); 0:
	// the interface's. A packet its encapsulation takes over it is
	// answered with ICMP too-big (docs/wire.md, "Path MTU").
	OutboundMTU     int
	HashFields      HashFields // never 0
	AltHashFields   HashFields // 0: no alternate hash
	ForwardICMPEcho bool
	// StatsdPort, when not 0, is where 'director run' sends GLB's statsd
	// metrics (to 127.0.0.1), as GLB's XDP director does.
	StatsdPort int
	// BGP, when not nil, is how 'director run' announces the VIPs.
	BGP      *BGP
	Warnings []string
}

// Gateway6 is the next hop of GUE over IPv6: GatewayMAC6, or GatewayMAC
// when the config gives none of its own.
func (c *DirectorConfig) Gateway6() net.HardwareAddr {
	if c.GatewayMAC6 != nil {
		return c.GatewayMAC6
	}
	return c.GatewayMAC
}

// DefaultDirectorConfig is what an empty file gives, bar the required
// source address.
func DefaultDirectorConfig() DirectorConfig {
	return DirectorConfig{HashFields: HashSrcAddr, ForwardICMPEcho: true}
}

// MarshalGLB writes the settings as GLB's director.conf JSON, which
// config.ParseDirector reads back to the same settings: plans carry a
// director config this way, with its gateway resolved.
func (c *DirectorConfig) MarshalGLB() ([]byte, error) {
	fields := func(h HashFields) map[string]bool {
		return map[string]bool{"src_addr": h&HashSrcAddr != 0, "dst_addr": h&HashDstAddr != 0,
			"src_port": h&HashSrcPort != 0, "dst_port": h&HashDstPort != 0}
	}
	m := map[string]any{"hash_fields": fields(c.HashFields), "forward_icmp_ping_responses": c.ForwardICMPEcho}
	if c.SrcIP.IsValid() {
		m["outbound_src_ip"] = c.SrcIP.String()
	}
	if c.SrcIP6.IsValid() {
		m["outbound_src_ip6"] = c.SrcIP6.String()
	}
	if c.GatewayMAC6 != nil {
		m["outbound_gateway_mac6"] = c.GatewayMAC6.String()
	}
	if c.GatewayMAC != nil {
		m["outbound_gateway_mac"] = c.GatewayMAC.String()
	}
	if c.AltHashFields != 0 {
		m["alt_hash_fields"] = fields(c.AltHashFields)
	}
	if c.OutboundInterface != "" {
		m["outbound_interface"] = c.OutboundInterface
	}
	if c.OutboundMTU != 0 {
		m["outbound_mtu"] = c.OutboundMTU
	}
	return json.Marshal(m)
}

// SettingChange is one director setting a change alters, with its verdict.
type SettingChange struct {
	Setting string `json:"setting"` // the director.conf key
	Old     string `json:"old"`     // "" when no director config is live
	New     string `json:"new"`
	Safe    bool   `json:"safe"`
	Reason  string `json:"reason"`
}

// CompareDirectorConfig lists what going from the live settings (nil when
// none are live) to new changes, each with a verdict. Unsafe: a new
// gateway MAC (a wrong one drops every steered packet), new hash fields
// unless alt_hash_fields carries the old ones (GLB's migration path), and
// new alternate fields during a migration. Both configs must have their
// gateway resolved.
func addrOrNone(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// mtuOrNone is an outbound_mtu as a plan shows it.
func mtuOrNone(n int) string {
	if n == 0 {
		return "(the interface's)"
	}
	return fmt.Sprint(n)
}

func CompareDirectorConfig(old, new *DirectorConfig) []SettingChange {
	var out []SettingChange
	add := func(setting, o, n string, safe bool, reason string) {
		out = append(out, SettingChange{Setting: setting, Old: o, New: n, Safe: safe, Reason: reason})
	}
	if old == nil {
		const first = "no director config is live yet: until one is, packets for the binds are passed, not steered"
		add("outbound_src_ip", "", addrOrNone(new.SrcIP), true, first)
		if new.SrcIP6.IsValid() {
			add("outbound_src_ip6", "", new.SrcIP6.String(), true, first)
		}
		add("outbound_gateway_mac", "", new.GatewayMAC.String(), true, first)
		add("hash_fields", "", new.HashFields.String(), true, first)
		add("alt_hash_fields", "", new.AltHashFields.String(), true, first)
		add("forward_icmp_ping_responses", "", fmt.Sprint(new.ForwardICMPEcho), true, first)
		return out
	}
	if old.SrcIP != new.SrcIP {
		add("outbound_src_ip", addrOrNone(old.SrcIP), addrOrNone(new.SrcIP), true,
			"flows keep their rows; backends see GUE packets from the new source and must accept them")
	}
	if old.SrcIP6 != new.SrcIP6 {
		add("outbound_src_ip6", addrOrNone(old.SrcIP6), addrOrNone(new.SrcIP6), true,
			"flows keep their rows; backends see GUE packets over IPv6 from the new source and must accept them")
	}
	if old.OutboundMTU != new.OutboundMTU {
		add("outbound_mtu", mtuOrNone(old.OutboundMTU), mtuOrNone(new.OutboundMTU), true,
			"flows keep their rows; packets their encapsulation takes over the new MTU are answered with ICMP too-big, and their clients send smaller ones")
	}
	if (old.GatewayMAC6 != nil || new.GatewayMAC6 != nil) && old.Gateway6().String() != new.Gateway6().String() {
		add("outbound_gateway_mac6", old.Gateway6().String(), new.Gateway6().String(), false,
			"every GUE packet over IPv6 goes to the new next hop: if it is wrong, all traffic steered to IPv6 backends is dropped")
	}
	if old.GatewayMAC.String() != new.GatewayMAC.String() {
		add("outbound_gateway_mac", old.GatewayMAC.String(), new.GatewayMAC.String(), false,
			"every GUE packet goes to the new next hop: if it is wrong, all steered traffic is dropped")
	}
	hashChanged := old.HashFields != new.HashFields
	if hashChanged {
		if new.AltHashFields == old.HashFields {
			add("hash_fields", old.HashFields.String(), new.HashFields.String(), true,
				"GLB's migration path: alt_hash_fields carries the old fields, so established connections keep their old row's hops through second chance")
		} else {
			add("hash_fields", old.HashFields.String(), new.HashFields.String(), false,
				fmt.Sprintf("every flow hashes to a new row, so established connections break; GLB's migration path keeps them: set alt_hash_fields to the old fields (%s) in the same change", old.HashFields))
		}
	}
	if old.AltHashFields != new.AltHashFields {
		switch {
		case hashChanged:
			add("alt_hash_fields", old.AltHashFields.String(), new.AltHashFields.String(), true, "part of the hash_fields change")
		case old.AltHashFields == 0:
			add("alt_hash_fields", old.AltHashFields.String(), new.AltHashFields.String(), true,
				"every packet also carries the alternate row's two hops; no flow changes its primary")
		case new.AltHashFields == 0:
			add("alt_hash_fields", old.AltHashFields.String(), new.AltHashFields.String(), true,
				"ends a hash migration: connections that still rely on the alternate hops break, so remove it once they have ended")
		default:
			add("alt_hash_fields", old.AltHashFields.String(), new.AltHashFields.String(), false,
				"connections that rely on the old alternate hops break")
		}
	}
	if old.ForwardICMPEcho != new.ForwardICMPEcho {
		add("forward_icmp_ping_responses", fmt.Sprint(old.ForwardICMPEcho), fmt.Sprint(new.ForwardICMPEcho), true,
			"only ICMP echo requests to VIPs change: steered to a backend, or answered by this host")
	}
	return out
}
