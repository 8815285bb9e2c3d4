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
	SrcIP             netip.Addr // outer IPv4 source
	HashFields        HashFields // never 0
	AltHashFields     HashFields // 0: no alternate hash
	ForwardICMPEcho   bool
	// StatsdPort, when not 0, is where 'director run' sends GLB's statsd
	// metrics (to 127.0.0.1), as GLB's XDP director does.
	StatsdPort int
	// BGP, when not nil, is how 'director run' announces the VIPs.
	BGP      *BGP
	Warnings []string
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
	m := map[string]any{"outbound_src_ip": c.SrcIP.String(), "hash_fields": fields(c.HashFields),
		"forward_icmp_ping_responses": c.ForwardICMPEcho}
	if c.GatewayMAC != nil {
		m["outbound_gateway_mac"] = c.GatewayMAC.String()
	}
	if c.AltHashFields != 0 {
		m["alt_hash_fields"] = fields(c.AltHashFields)
	}
	if c.OutboundInterface != "" {
		m["outbound_interface"] = c.OutboundInterface
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
func CompareDirectorConfig(old, new *DirectorConfig) []SettingChange {
	var out []SettingChange
	add := func(setting, o, n string, safe bool, reason string) {
		out = append(out, SettingChange{Setting: setting, Old: o, New: n, Safe: safe, Reason: reason})
	}
	if old == nil {
		const first = "no director config is live yet: until one is, packets for the binds are passed, not steered"
		add("outbound_src_ip", "", new.SrcIP.String(), true, first)
		add("outbound_gateway_mac", "", new.GatewayMAC.String(), true, first)
		add("hash_fields", "", new.HashFields.String(), true, first)
		add("alt_hash_fields", "", new.AltHashFields.String(), true, first)
		add("forward_icmp_ping_responses", "", fmt.Sprint(new.ForwardICMPEcho), true, first)
		return out
	}
	if old.SrcIP != new.SrcIP {
		add("outbound_src_ip", old.SrcIP.String(), new.SrcIP.String(), true,
			"flows keep their rows; backends see GUE packets from the new source and must accept them")
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
