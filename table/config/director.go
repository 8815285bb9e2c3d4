package config

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"

	"github.com/director/director/table"
)

// GLB's DPDK director reads these; an XDP director has no use for them.
var dpdkOnlyKeys = []string{"kni_ip", "num_worker_queues", "rx_drop_en", "flow_paths", "lcores"}

// ParseDirectorFile reads and validates a director config file.
func ParseDirectorFile(path string) (*table.DirectorConfig, error) {
	data, err := readFileMax(path, MaxDirectorConfigBytes, "a director config")
	if err != nil {
		return nil, err
	}
	c, err := ParseDirector(data)
	if err != nil {
		return nil, InFile(path, err)
	}
	return c, nil
}

// ParseDirector parses GLB's director.conf JSON.
func ParseDirector(data []byte) (*table.DirectorConfig, error) {
	root, err := parseJSON(data)
	if err != nil {
		return nil, table.ErrorList{{Msg: "invalid JSON: " + err.Error()}}
	}
	p := &parser{}
	c := table.DefaultDirectorConfig()
	allowed := append([]string{"outbound_gateway_mac", "outbound_src_ip", "outbound_interface", "hash_fields", "alt_hash_fields",
		"outbound_src_ip6", "outbound_gateway_mac6", "outbound_mtu",
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
		if v := root.get("outbound_gateway_mac6"); v != nil {
			if v.kind != jsonString {
				p.fail("outbound_gateway_mac6", "%s is not a string", v.brief())
			} else if mac, err := net.ParseMAC(v.str); err != nil || len(mac) != 6 {
				p.fail("outbound_gateway_mac6", "%s is not an Ethernet MAC address", v.brief())
			} else {
				c.GatewayMAC6 = mac
			}
		}
		if v := root.get("outbound_src_ip6"); v != nil {
			c.SrcIP6 = p.unicast6("outbound_src_ip6", v)
		}
		// GLB's key is required, unless the director sends GUE over IPv6
		// alone.
		if v := root.get("outbound_src_ip"); v != nil || root.get("outbound_src_ip6") == nil {
			if v := p.required("", root, "outbound_src_ip", jsonString); v != nil {
				a, err := netip.ParseAddr(v.str)
				if err != nil || !a.Is4() {
					p.fail("outbound_src_ip", "%s is not an IPv4 address (GUE over IPv6 takes its source from outbound_src_ip6)", v.brief())
				}
				c.SrcIP = a
			}
		}
		if v := root.get("outbound_mtu"); v != nil {
			n, err := strconv.ParseInt(v.num.String(), 10, 64)
			if v.kind != jsonNumber || err != nil || n < 1280 || n > 65535 {
				p.fail("outbound_mtu", "%s is not an MTU from 1280 (IPv6's minimum; no underlay is smaller) to 65535", v.brief())
			} else {
				c.OutboundMTU = int(n)
			}
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

// unicast6 reads an address packets are sent from: IPv6, and one a
// router forwards (not link-local, multicast, loopback or unspecified).
func (p *parser) unicast6(path string, v *jsonValue) netip.Addr {
	if v.kind != jsonString {
		p.fail(path, "%s is not a string", v.brief())
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(v.str)
	switch {
	case err != nil || a.Zone() != "":
		p.fail(path, "%s is not an IPv6 address", v.brief())
	case !a.Is6() || a.Is4In6():
		p.fail(path, "%s is not IPv6 (GUE over IPv4 takes its source from outbound_src_ip)", v.brief())
	case a.IsLinkLocalUnicast():
		p.fail(path, "%s is link-local: GUE packets cross routers, so the source must be a global or unique local address", v.brief())
	case a.IsMulticast(), a.IsUnspecified(), a.IsLoopback():
		p.fail(path, "%s is not a unicast address a backend can answer", v.brief())
	default:
		return a
	}
	return netip.Addr{}
}

func (p *parser) hashFields(path string, v *jsonValue) table.HashFields {
	if !p.object(path, v, "src_addr", "dst_addr", "src_port", "dst_port") {
		return 0
	}
	var h table.HashFields
	for _, m := range v.members {
		if m.val.kind != jsonBool {
			p.fail(join(path, m.key), "%s is not true or false", m.val.brief())
			continue
		}
		if m.val.boolean {
			h |= map[string]table.HashFields{"src_addr": table.HashSrcAddr, "dst_addr": table.HashDstAddr, "src_port": table.HashSrcPort, "dst_port": table.HashDstPort}[m.key]
		}
	}
	if h == 0 {
		p.fail(path, "must enable at least one field")
	}
	return h
}
