package table

import (
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
	// file leaves it out (then the default route's gateway is resolved).
	GatewayMAC      net.HardwareAddr
	SrcIP           netip.Addr // outer IPv4 source
	HashFields      HashFields // never 0
	AltHashFields   HashFields // 0: no alternate hash
	ForwardICMPEcho bool
	Warnings        []string
}

// DefaultDirectorConfig is what an empty file gives, bar the required
// source address.
func DefaultDirectorConfig() DirectorConfig {
	return DirectorConfig{HashFields: HashSrcAddr, ForwardICMPEcho: true}
}

// GLB's DPDK director reads these; an XDP director has no use for them.
var dpdkOnlyKeys = []string{"statsd_port", "kni_ip", "num_worker_queues", "rx_drop_en", "flow_paths", "lcores"}

// LoadDirectorConfig reads and validates a director config file.
func LoadDirectorConfig(path string) (*DirectorConfig, error) {
	data, err := readFileMax(path, maxDirectorConfigBytes, "a director config")
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
	allowed := append([]string{"outbound_gateway_mac", "outbound_src_ip", "hash_fields", "alt_hash_fields", "forward_icmp_ping_responses"}, dpdkOnlyKeys...)
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
