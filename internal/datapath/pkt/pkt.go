// Package pkt builds frames byte by byte, for synthetic captures
// (gen-capture) and tests: Ethernet (optionally 802.1Q-tagged), IPv4 (with
// options, fragments), IPv6 (with extension headers), TCP, UDP and ICMP.
// Checksums of the IP headers are correct; transport checksums are left
// zero unless asked for, since steering never reads them.
package pkt

import (
	"encoding/binary"
	"net/netip"

	"github.com/director/director/internal/datapath/gue"
)

// MACs the frames use: a client, the director and its gateway.
var (
	ClientMAC   = [6]byte{0x02, 0, 0, 0, 0, 0x01}
	DirectorMAC = [6]byte{0x02, 0, 0, 0, 0, 0x02}
	GatewayMAC  = [6]byte{0x02, 0, 0, 0, 0, 0x03}
)

// Eth wraps an IP packet in Ethernet; vlan > 0 adds an 802.1Q tag.
func Eth(dst, src [6]byte, vlan int, etype uint16, payload []byte) []byte {
	b := append(append([]byte{}, dst[:]...), src[:]...)
	if vlan > 0 {
		b = binary.BigEndian.AppendUint16(b, 0x8100)
		b = binary.BigEndian.AppendUint16(b, uint16(vlan))
	}
	b = binary.BigEndian.AppendUint16(b, etype)
	return append(b, payload...)
}

// EtherType for an IP packet.
func EtherType(ip []byte) uint16 {
	if len(ip) > 0 && ip[0]>>4 == 6 {
		return 0x86dd
	}
	return 0x0800
}

// Frame wraps an IP packet from the client to the director.
func Frame(ip []byte) []byte { return Eth(DirectorMAC, ClientMAC, 0, EtherType(ip), ip) }

// IPv4 options and fragment fields.
type V4Opts struct {
	Options  []byte // padded to 4 bytes by the caller
	FragOff  uint16 // flags and offset field, host order (0x2000 MF)
	TTL      uint8
	ID       uint16
	TotalLen int // override of the length field when non-zero
}

// IPv4 builds an IPv4 packet.
func IPv4(src, dst netip.Addr, proto uint8, payload []byte, o V4Opts) []byte {
	hl := 20 + len(o.Options)
	h := make([]byte, hl)
	h[0] = 0x40 | byte(hl/4)
	tot := hl + len(payload)
	if o.TotalLen != 0 {
		tot = o.TotalLen
	}
	binary.BigEndian.PutUint16(h[2:], uint16(tot))
	binary.BigEndian.PutUint16(h[4:], o.ID)
	binary.BigEndian.PutUint16(h[6:], o.FragOff)
	h[8] = o.TTL
	if h[8] == 0 {
		h[8] = 64
	}
	h[9] = proto
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	copy(h[20:], o.Options)
	binary.BigEndian.PutUint16(h[10:], gue.Checksum(h))
	return append(h, payload...)
}

// Ext is an IPv6 extension header: its type and body (the body is padded
// to a multiple of 8 bytes including the 2-byte header).
type Ext struct {
	Type uint8
	Body []byte
}

// IPv6 builds an IPv6 packet with optional extension headers.
func IPv6(src, dst netip.Addr, proto uint8, payload []byte, exts ...Ext) []byte {
	var ext []byte
	for i, e := range exts {
		next := proto
		if i+1 < len(exts) {
			next = exts[i+1].Type
		}
		body := e.Body
		for (len(body)+2)%8 != 0 {
			body = append(body, 0)
		}
		ext = append(ext, next, byte((len(body)+2)/8-1))
		ext = append(ext, body...)
	}
	first := proto
	if len(exts) > 0 {
		first = exts[0].Type
	}
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(ext)+len(payload)))
	h[6] = first
	h[7] = 64
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(append(h, ext...), payload...)
}

// TCP builds a TCP header (flags e.g. 0x02 SYN) with payload.
func TCP(sport, dport uint16, flags byte, payload []byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h, sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint32(h[4:], 1000)
	h[12] = 5 << 4
	h[13] = flags
	binary.BigEndian.PutUint16(h[14:], 65535)
	return append(h, payload...)
}

// UDP builds a UDP header with payload.
func UDP(sport, dport uint16, payload []byte) []byte {
	h := make([]byte, 8)
	binary.BigEndian.PutUint16(h, sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint16(h[4:], uint16(8+len(payload)))
	return append(h, payload...)
}

// ICMP builds an ICMP or ICMPv6 message: type, code, the 4-byte rest of
// header (MTU for fragmentation-needed and packet-too-big), and a body
// (the quoted packet, or echo data).
func ICMP(typ, code uint8, rest uint32, body []byte) []byte {
	h := make([]byte, 8)
	h[0], h[1] = typ, code
	binary.BigEndian.PutUint32(h[4:], rest)
	b := append(h, body...)
	binary.BigEndian.PutUint16(b[2:], gue.Checksum(b))
	return b
}

// ICMPv6 builds an ICMPv6 message from src to dst: ICMP's layout, with
// the checksum over RFC 8200's pseudo-header as well, which a receiving
// stack checks (the GUE health check's echo request is answered only so).
func ICMPv6(src, dst netip.Addr, typ, code uint8, rest uint32, body []byte) []byte {
	b := ICMP(typ, code, rest, body)
	b[2], b[3] = 0, 0
	ph := make([]byte, 40, 40+len(b))
	s, d := src.As16(), dst.As16()
	copy(ph, s[:])
	copy(ph[16:], d[:])
	binary.BigEndian.PutUint32(ph[32:], uint32(len(b)))
	ph[39] = 58
	binary.BigEndian.PutUint16(b[2:], gue.Checksum(append(ph, b...)))
	return b
}
