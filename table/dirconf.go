package table

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"regexp"
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

// GLB's DPDK director reads these; an XDP director has no use for them.
var dpdkOnlyKeys = []string{"kni_ip", "num_worker_queues", "rx_drop_en", "flow_paths", "lcores"}

// LoadDirectorConfig reads and validates a director config file.
func LoadDirectorConfig(path string) (*DirectorConfig, error) {
	data, err := readFileMax(path, MaxDirectorConfigBytes, "a director config")
	if err != nil {
		return nil, err
	}
	c, err := ParseDirectorConfig(data)
	if err != nil {
		return nil, InFile(path, err)
	}
	return c, nil
}

// ParseDirectorConfig parses GLB's director.conf JSON.
func ParseDirectorConfig(data []byte) (*DirectorConfig, error) {
	root, err := parseJSON(data)
	if err != nil {
		return nil, ErrorList{{Msg: "invalid JSON: " + err.Error()}}
	}
	p := &parser{}
	c := DefaultDirectorConfig()
	allowed := append([]string{"outbound_gateway_mac", "outbound_src_ip", "outbound_interface", "hash_fields", "alt_hash_fields",
		"forward_icmp_ping_responses", "statsd_port", "bgp"}, dpdkOnlyKeys...)
	if p.object("", root, allowed...) {
		for _, m := range root.members {
			for _, k := range dpdkOnlyKeys {
				if m.key == k {
					p.warns = append(p.warns, fmt.Sprintf("%s: ignored (used only by GLB's DPDK director)", k))
				}
			}
		}
		if v := root.get("outbound_gateway_mac"); v != nil {
			if v.kind != jsonString {
				p.fail("outbound_gateway_mac", "%s is not a string", v.brief())
			} else if mac, err := net.ParseMAC(v.str); err != nil || len(mac) != 6 {
				p.fail("outbound_gateway_mac", "%s is not an Ethernet MAC address", v.brief())
			} else {
				c.GatewayMAC = mac
			}
		}
		if v := root.get("outbound_interface"); v != nil {
			if v.kind != jsonString {
				p.fail("outbound_interface", "%s is not a string", v.brief())
			} else if !ifaceRE.MatchString(v.str) {
				p.fail("outbound_interface", "%s is not an interface name (1-15 characters, no '/', ':' or spaces)", v.brief())
			} else {
				c.OutboundInterface = v.str
			}
		}
		if v := p.required("", root, "outbound_src_ip", jsonString); v != nil {
			a, err := netip.ParseAddr(v.str)
			if err != nil || !a.Is4() {
				p.fail("outbound_src_ip", "%s is not an IPv4 address (GUE packets are sent over IPv4)", v.brief())
			}
			c.SrcIP = a
		}
		if v := root.get("forward_icmp_ping_responses"); v != nil {
			if v.kind != jsonBool {
				p.fail("forward_icmp_ping_responses", "%s is not true or false", v.brief())
			} else {
				c.ForwardICMPEcho = v.boolean
			}
		}
		if v := root.get("statsd_port"); v != nil {
			if n, ok := p.port("statsd_port", v); ok {
				c.StatsdPort = int(n)
			}
		}
		if v := root.get("bgp"); v != nil {
			c.BGP = p.bgp("bgp", v)
		}
		if v := root.get("hash_fields"); v != nil {
			c.HashFields = p.hashFields("hash_fields", v)
		}
		if v := root.get("alt_hash_fields"); v != nil {
			c.AltHashFields = p.hashFields("alt_hash_fields", v)
		}
	}
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	c.Warnings = p.warns
	return &c, nil
}

var ifaceRE = regexp.MustCompile(`^[^/:\s]{1,15}$`)

func (p *parser) hashFields(path string, v *jsonValue) HashFields {
	if !p.object(path, v, "src_addr", "dst_addr", "src_port", "dst_port") {
		return 0
	}
	var h HashFields
	for _, m := range v.members {
		if m.val.kind != jsonBool {
			p.fail(join(path, m.key), "%s is not true or false", m.val.brief())
			continue
		}
		if m.val.boolean {
			h |= map[string]HashFields{"src_addr": HashSrcAddr, "dst_addr": HashDstAddr, "src_port": HashSrcPort, "dst_port": HashDstPort}[m.key]
		}
	}
	if h == 0 {
		p.fail(path, "must enable at least one field")
	}
	return h
}

// MarshalGLB writes the settings as GLB's director.conf JSON, which
// ParseDirectorConfig reads back to the same settings: plans carry a
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
