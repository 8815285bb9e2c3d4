// Package gue is GLB's GUE encapsulation in Go: what a director puts in
// front of a packet it steers (outer IPv4, UDP, GUE with GLB's hop list),
// and how such a packet is read back. The model encapsulates with it, and
// replays and tests read hops with it. Its constants and layout are
// bpf/gue.h's, through bpf2go: the wire format has one definition.
package gue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/director/director/bpf/abi"
)

// Constants of the format (bpf/gue.h).
const (
	// Port is the UDP destination port of GUE packets.
	Port = abi.GUEPort
	// MaxHops is the most hops a packet carries: a row's primary and
	// secondary, with alt_hash_fields the alternate row's two, and its
	// earlier primaries (table.HistoryHops).
	MaxHops = abi.GUEMaxHops
	// PrivateTypeGLB is GLB's private data type.
	PrivateTypeGLB = abi.GUEPrivateTypeGLB
	// Inner protocols, as GUE's proto field gives them.
	ProtoIPv4 = 4
	ProtoIPv6 = 41
	// The outer IPv4 header's fixed fields.
	ipv4VersionIHL = abi.IPv4VersionIHL
	ipv4DF         = abi.IPv4DF
	ipv4TTL        = abi.IPv4TTL
	ipv4Proto      = abi.IPv4Proto
	// GUE's hlen byte: version and C above the private data's length.
	hlenMask    = abi.GUEHlenMask
	hlenVCShift = abi.GUEHlenVCShift
)

// The IPv6 underlay's (gue.h): director's IPv6 hop list.
const (
	PrivateTypeV6  = abi.GUEPrivateTypeV6
	ipv6Version    = abi.IPv6Version
	ipv6NextHeader = abi.IPv6NextHeader
	ipv6HopLimit   = abi.IPv6HopLimit
	// FlowMask is the outer IPv6 flow label's bits.
	FlowMask = abi.IPv6FlowMask
)

// Where the fields are, from the generated struct glb_encap.
var (
	encap    abi.GLBEncap
	offSport = int(unsafe.Offsetof(encap.Sport))
	offDport = int(unsafe.Offsetof(encap.Dport))
	offLen   = int(unsafe.Offsetof(encap.Len))
	offCheck = int(unsafe.Offsetof(encap.Check))
	offGUE   = int(unsafe.Offsetof(encap.Gue))
	offProto = offGUE + int(unsafe.Offsetof(encap.Gue.Proto))
	offFlags = offGUE + int(unsafe.Offsetof(encap.Gue.Flags))
	offType  = offGUE + int(unsafe.Offsetof(encap.Gue.PrivateType))
	offNext  = offGUE + int(unsafe.Offsetof(encap.Gue.NextHop))
	offCount = offGUE + int(unsafe.Offsetof(encap.Gue.HopCount))
	offHops  = offGUE + int(unsafe.Offsetof(encap.Gue.Hops))
	fullSize = int(unsafe.Sizeof(encap))
)

// And in the IPv6 underlay's, struct dir_gue6_encap.
var (
	encap6    abi.Gue6Encap
	off6Sport = int(unsafe.Offsetof(encap6.Sport))
	off6Dport = int(unsafe.Offsetof(encap6.Dport))
	off6Len   = int(unsafe.Offsetof(encap6.Len))
	off6Check = int(unsafe.Offsetof(encap6.Check))
	off6GUE   = int(unsafe.Offsetof(encap6.Gue))
	off6Proto = off6GUE + int(unsafe.Offsetof(encap6.Gue.Proto))
	off6Flags = off6GUE + int(unsafe.Offsetof(encap6.Gue.Flags))
	off6Type  = off6GUE + int(unsafe.Offsetof(encap6.Gue.PrivateType))
	off6Next  = off6GUE + int(unsafe.Offsetof(encap6.Gue.NextHop))
	off6Count = off6GUE + int(unsafe.Offsetof(encap6.Gue.HopCount))
	off6Hops  = off6GUE + int(unsafe.Offsetof(encap6.Gue.Hops))
	fullSize6 = int(unsafe.Sizeof(encap6))
)

// Size is the encapsulation's length with nhops hops: the primary, which
// is the outer destination, and the others listed in GUE.
func Size(nhops int) int { return fullSize - 4*(MaxHops-nhops) }

// Size6 is Size for the IPv6 underlay: 16-byte hops.
func Size6(nhops int) int { return fullSize6 - 16*(MaxHops-nhops) }

// SizeOf is the encapsulation's length for h's hops and family.
func (h *Header) SizeOf() int {
	if h.Hops[0].Is6() {
		return Size6(len(h.Hops))
	}
	return Size(len(h.Hops))
}

// Header is one packet's encapsulation.
type Header struct {
	Src        netip.Addr   // the outer IPv4 source: the director
	Hops       []netip.Addr // primary first (the outer destination), then those listed; IPv4
	SourcePort uint16       // UDP source port
	NextHop    uint8        // index in the listed hops of the next to try
	Proto      uint8        // the inner packet's: ProtoIPv4 or ProtoIPv6
	// FlowLabel is the outer IPv6 header's, for IPv6 hops (FlowMask bits).
	FlowLabel uint32
}

// Append appends h's encapsulation, Size(len(h.Hops)) bytes, to b, for an
// inner IP packet of innerLen bytes that follows it: an outer IPv4 header
// (IHL 5, DF, TTL 64, checksum), UDP to Port with no checksum, GUE
// version 0 with GLB's private data.
func (h *Header) Append(b []byte, innerLen int) []byte {
	if h.Hops[0].Is6() {
		return h.append6(b, innerLen)
	}
	n := len(h.Hops)
	size := Size(n)
	start := len(b)
	b = append(b, make([]byte, size)...)
	e := b[start:]
	ipLen := size + innerLen
	e[0] = ipv4VersionIHL
	binary.BigEndian.PutUint16(e[2:], uint16(ipLen))
	binary.BigEndian.PutUint16(e[6:], ipv4DF)
	e[8], e[9] = ipv4TTL, ipv4Proto
	src, dst := h.Src.As4(), h.Hops[0].As4()
	copy(e[12:], src[:])
	copy(e[16:], dst[:])
	binary.BigEndian.PutUint16(e[10:], Checksum(e[:20]))
	binary.BigEndian.PutUint16(e[offSport:], h.SourcePort)
	binary.BigEndian.PutUint16(e[offDport:], Port)
	binary.BigEndian.PutUint16(e[offLen:], uint16(ipLen-20))
	binary.BigEndian.PutUint16(e[offCheck:], 0)
	e[offGUE] = byte(n) & hlenMask // version 0, C 0, hlen = 1 + listed
	e[offProto] = h.Proto
	binary.BigEndian.PutUint16(e[offFlags:], 0)
	binary.BigEndian.PutUint16(e[offType:], PrivateTypeGLB)
	e[offNext], e[offCount] = h.NextHop, byte(n-1)
	for i, hop := range h.Hops[1:] {
		a := hop.As4()
		copy(e[offHops+4*i:], a[:])
	}
	return b
}

// append6 is Append for IPv6 hops (docs/wire.md): outer IPv6 from Src,
// flow label FlowLabel, hop limit 64; UDP to Port with no checksum (RFC
// 6935); GUE with director's IPv6 hop list.
func (h *Header) append6(b []byte, innerLen int) []byte {
	n := len(h.Hops)
	size := Size6(n)
	start := len(b)
	b = append(b, make([]byte, size)...)
	e := b[start:]
	plen := size - 40 + innerLen
	binary.BigEndian.PutUint32(e[0:], uint32(ipv6Version)<<28|h.FlowLabel&FlowMask)
	binary.BigEndian.PutUint16(e[4:], uint16(plen))
	e[6], e[7] = ipv6NextHeader, ipv6HopLimit
	src, dst := h.Src.As16(), h.Hops[0].As16()
	copy(e[8:], src[:])
	copy(e[24:], dst[:])
	binary.BigEndian.PutUint16(e[off6Sport:], h.SourcePort)
	binary.BigEndian.PutUint16(e[off6Dport:], Port)
	binary.BigEndian.PutUint16(e[off6Len:], uint16(plen))
	binary.BigEndian.PutUint16(e[off6Check:], 0)
	e[off6GUE] = byte(1+4*(n-1)) & hlenMask // version 0, C 0, hlen = 1 + 4 per hop listed
	e[off6Proto] = h.Proto
	binary.BigEndian.PutUint16(e[off6Flags:], 0)
	binary.BigEndian.PutUint16(e[off6Type:], PrivateTypeV6)
	e[off6Next], e[off6Count] = h.NextHop, byte(n-1)
	for i, hop := range h.Hops[1:] {
		a := hop.As16()
		copy(e[off6Hops+16*i:], a[:])
	}
	return b
}

// ErrNotGUE is Parse's error for a packet that is not GLB's GUE.
var ErrNotGUE = errors.New("not a GLB GUE packet")

// Parse reads the encapsulation at the start of p, which begins with the
// outer IP header (IPv4, or IPv6 for the IPv6 underlay), and returns it
// with the inner packet's offset in p.
func Parse(p []byte) (Header, int, error) {
	if len(p) > 0 && p[0]>>4 == ipv6Version {
		return parse6(p)
	}
	var h Header
	if len(p) < offHops || p[0] != ipv4VersionIHL || p[9] != ipv4Proto || binary.BigEndian.Uint16(p[offDport:]) != Port {
		return h, 0, ErrNotGUE
	}
	hlen, listed := int(p[offGUE]), int(p[offCount])
	if hlen>>hlenVCShift != 0 || hlen&int(hlenMask) != 1+listed || listed > MaxHops-1 || binary.BigEndian.Uint16(p[offType:]) != PrivateTypeGLB {
		return h, 0, fmt.Errorf("%w: GUE header %x", ErrNotGUE, p[offGUE:offHops])
	}
	inner := offHops + 4*listed
	if len(p) < inner {
		return h, 0, fmt.Errorf("%w: %d hops listed in %d bytes", ErrNotGUE, listed, len(p))
	}
	h.Src = netip.AddrFrom4([4]byte(p[12:16]))
	h.Hops = append(h.Hops, netip.AddrFrom4([4]byte(p[16:20])))
	for i := 0; i < listed; i++ {
		h.Hops = append(h.Hops, netip.AddrFrom4([4]byte(p[offHops+4*i:])))
	}
	h.SourcePort = binary.BigEndian.Uint16(p[offSport:])
	h.NextHop, h.Proto = p[offNext], p[offProto]
	return h, inner, nil
}

func parse6(p []byte) (Header, int, error) {
	var h Header
	if len(p) < off6Hops || p[6] != ipv6NextHeader || binary.BigEndian.Uint16(p[off6Dport:]) != Port {
		return h, 0, ErrNotGUE
	}
	hlen, listed := int(p[off6GUE]), int(p[off6Count])
	if hlen>>hlenVCShift != 0 || hlen&int(hlenMask) != 1+4*listed || listed > MaxHops-1 || binary.BigEndian.Uint16(p[off6Type:]) != PrivateTypeV6 {
		return h, 0, fmt.Errorf("%w: GUE header %x", ErrNotGUE, p[off6GUE:off6Hops])
	}
	inner := off6Hops + 16*listed
	if len(p) < inner {
		return h, 0, fmt.Errorf("%w: %d hops listed in %d bytes", ErrNotGUE, listed, len(p))
	}
	h.Src = netip.AddrFrom16([16]byte(p[8:24]))
	h.Hops = append(h.Hops, netip.AddrFrom16([16]byte(p[24:40])))
	for i := 0; i < listed; i++ {
		h.Hops = append(h.Hops, netip.AddrFrom16([16]byte(p[off6Hops+16*i:])))
	}
	h.SourcePort = binary.BigEndian.Uint16(p[off6Sport:])
	h.NextHop, h.Proto = p[off6Next], p[off6Proto]
	h.FlowLabel = binary.BigEndian.Uint32(p[0:]) & FlowMask
	return h, inner, nil
}

// ParseFrame is Parse of an Ethernet frame (one 802.1Q tag allowed).
func ParseFrame(f []byte) (Header, int, error) {
	l2 := 14
	if len(f) >= 18 && f[12] == 0x81 && f[13] == 0 {
		l2 = 18
	}
	if len(f) < l2 || !(f[l2-2] == 0x08 && f[l2-1] == 0 || f[l2-2] == 0x86 && f[l2-1] == 0xdd) {
		return Header{}, 0, ErrNotGUE
	}
	h, inner, err := Parse(f[l2:])
	return h, l2 + inner, err
}

// Checksum is the Internet checksum of b, for checking headers.
func Checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
