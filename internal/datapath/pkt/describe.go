package pkt

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/director/director/internal/datapath/gue"
)

// Describe is a frame in words, layer by layer, as the golden packets are
// written: "eth 02:00:00:00:00:01 > 02:00:00:00:00:02 | ipv4 203.0.113.7
// > 10.20.0.1 ttl 64 | tcp 40000 > 80 [S]", a GUE encapsulation's header
// and hops, then its inner packet. What it cannot read is left as a byte
// count, so a truncated or odd frame still describes as far as it goes.
func Describe(f []byte) string {
	var parts []string
	if len(f) < 14 {
		return fmt.Sprintf("%d bytes: shorter than an Ethernet header", len(f))
	}
	etype := binary.BigEndian.Uint16(f[12:])
	eth := fmt.Sprintf("eth %s > %s", net.HardwareAddr(f[6:12]), net.HardwareAddr(f[0:6]))
	p := f[14:]
	if etype == 0x8100 && len(p) >= 4 {
		eth += fmt.Sprintf(" vlan %d", binary.BigEndian.Uint16(p)&0xfff)
		etype, p = binary.BigEndian.Uint16(p[2:]), p[4:]
	}
	parts = append(parts, eth)
	parts = append(parts, describeIP(etype, p)...)
	return strings.Join(parts, " | ")
}

func describeIP(etype uint16, p []byte) []string {
	switch etype {
	case 0x0800:
		if len(p) < 20 {
			return []string{fmt.Sprintf("ipv4, %d bytes (truncated)", len(p))}
		}
		hl := int(p[0]&0xf) * 4
		s := fmt.Sprintf("ipv4 %s > %s ttl %d len %d", netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20])),
			p[8], binary.BigEndian.Uint16(p[2:]))
		if hl != 20 {
			s += fmt.Sprintf(" ihl %d", hl/4)
		}
		if fo := binary.BigEndian.Uint16(p[6:]); fo&0x3fff != 0 {
			s += fmt.Sprintf(" frag %#04x", fo)
		} else if fo&0x4000 != 0 {
			s += " DF"
		}
		if h, inner, err := gue.Parse(p); err == nil {
			return append([]string{s, describeGUE(h)}, describeIP(innerEtype(h.Proto), p[inner:])...)
		}
		if hl < 20 || len(p) < hl {
			return []string{s, fmt.Sprintf("%d bytes", len(p)-min(len(p), 20))}
		}
		return append([]string{s}, describeL4(p[9], p[hl:])...)
	case 0x86dd:
		if len(p) < 40 {
			return []string{fmt.Sprintf("ipv6, %d bytes (truncated)", len(p))}
		}
		s := fmt.Sprintf("ipv6 %s > %s hlim %d plen %d", netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40])),
			p[7], binary.BigEndian.Uint16(p[4:]))
		if fl := binary.BigEndian.Uint32(p) & 0xfffff; fl != 0 {
			s += fmt.Sprintf(" flow %#05x", fl)
		}
		if h, inner, err := gue.Parse(p); err == nil {
			return append([]string{s, describeGUE(h)}, describeIP(innerEtype(h.Proto), p[inner:])...)
		}
		nh, rest := p[6], p[40:]
		for (nh == 0 || nh == 43 || nh == 60 || nh == 44) && len(rest) >= 8 {
			n := 8 + 8*int(rest[1])
			if nh == 44 {
				n = 8
			}
			s += fmt.Sprintf(" ext %d", nh)
			nh = rest[0]
			rest = rest[min(n, len(rest)):]
		}
		return append([]string{s}, describeL4(nh, rest)...)
	}
	return []string{fmt.Sprintf("ethertype %#04x, %d bytes", etype, len(p))}
}

func innerEtype(proto uint8) uint16 {
	if proto == gue.ProtoIPv6 {
		return 0x86dd
	}
	return 0x0800
}

func describeGUE(h gue.Header) string {
	hops := make([]string, len(h.Hops))
	for i, a := range h.Hops {
		hops[i] = a.String()
	}
	return fmt.Sprintf("udp %d > %d gue proto %d next %d hops [%s]", h.SourcePort, gue.Port, h.Proto, h.NextHop, strings.Join(hops, " "))
}

func describeL4(proto uint8, p []byte) []string {
	switch proto {
	case 6:
		if len(p) < 14 {
			return []string{fmt.Sprintf("tcp, %d bytes (truncated)", len(p))}
		}
		flags := ""
		for i, c := range "FSRPAU" {
			if p[13]&(1<<i) != 0 {
				flags += string(c)
			}
		}
		return []string{fmt.Sprintf("tcp %d > %d [%s] %d bytes", binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:]), flags, len(p))}
	case 17:
		if len(p) < 8 {
			return []string{fmt.Sprintf("udp, %d bytes (truncated)", len(p))}
		}
		return []string{fmt.Sprintf("udp %d > %d %d bytes", binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:]), len(p))}
	case 1, 58:
		if len(p) < 4 {
			return []string{fmt.Sprintf("icmp, %d bytes (truncated)", len(p))}
		}
		name := "icmp"
		if proto == 58 {
			name = "icmpv6"
		}
		s := fmt.Sprintf("%s type %d code %d", name, p[0], p[1])
		// A quoted packet (destination unreachable, time exceeded, packet
		// too big) after the ICMP header.
		if len(p) >= 8+20 && ((proto == 1 && (p[0] == 3 || p[0] == 11)) || (proto == 58 && p[0] >= 1 && p[0] <= 4)) {
			q := p[8:]
			et := uint16(0x0800)
			if q[0]>>4 == 6 {
				et = 0x86dd
			}
			return append([]string{s, "quoting"}, describeIP(et, q)...)
		}
		return []string{s + fmt.Sprintf(" %d bytes", len(p))}
	}
	return []string{fmt.Sprintf("proto %d, %d bytes", proto, len(p))}
}
