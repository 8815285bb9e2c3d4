package model

import (
	"encoding/binary"
	"net/netip"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/gue"
)

// packet is what the datapath reads of a frame beside its flow: its
// lengths and the places of its headers.
type packet struct {
	frame        []byte
	l2len, ipLen int
	v6           bool
	icmpErr      bool // an ICMP error, steered by the flow it quotes
	// l4 is the offset in the frame of a TCP or UDP header, the quoted
	// one in an ICMP error (icmpErr), 0 for none.
	l4 int
}

// parseFrame reads a frame up to its flow. A reason other than 0 is the
// pass counter the frame is passed for (f may then be partly filled).
func parseFrame(frame []byte, f *Flow) (pk packet, reason int) {
	pk.frame = frame
	if len(frame) > MaxFrame {
		return pk, abi.CPassTooBig // no XDP hook receives a frame this large
	}
	if len(frame) < 14 {
		return pk, abi.CPassMalformed
	}
	etype := binary.BigEndian.Uint16(frame[12:])
	pk.l2len = 14
	switch etype {
	case 0x8100:
		if len(frame) < 18 {
			return pk, abi.CPassMalformed
		}
		etype = binary.BigEndian.Uint16(frame[16:])
		pk.l2len = 18
		if etype == 0x8100 || etype == 0x88a8 {
			return pk, abi.CPassVLAN
		}
	case 0x88a8:
		return pk, abi.CPassVLAN
	}
	// The headers the program reads must lie in the first buffer.
	ip := ipView{p: frame[pk.l2len:], first: min(len(frame), FirstBuffer) - pk.l2len}
	switch etype {
	case 0x0800:
		pk.ipLen, pk.icmpErr, reason = parseIPv4(&ip, f)
	case 0x86dd:
		pk.ipLen, pk.icmpErr, reason = parseIPv6(&ip, f)
		pk.v6 = true
	default:
		return pk, abi.CPassNotIP
	}
	// The outer IPv4 length must hold the largest encapsulation and the
	// packet.
	if reason == 0 && pk.ipLen > 0xffff-gue.Size(gue.MaxHops) {
		return pk, abi.CPassTooBig
	}
	if ip.l4 != 0 {
		pk.l4 = pk.l2len + ip.l4
	}
	return pk, reason
}

// ipView is an IP packet and the frame after it (p), of which the first
// `first` bytes are in the frame's first buffer.
type ipView struct {
	p     []byte
	first int
	tot   int // the IP packet's length, once known
	l4    int // the offset of a TCP or UDP header, once read
}

// read checks a read of n bytes at off, as the program's bounds checks do:
// past the IP packet it is malformed; within it but past the first buffer,
// the headers were split.
func (v *ipView) read(off, n int) int {
	switch {
	case off+n > v.tot:
		return abi.CPassMalformed
	case off+n > v.first:
		return abi.CPassHeadersSplit
	}
	return 0
}

// ports reads the two ports at off.
func (v *ipView) ports(off int, reversed bool, f *Flow) int {
	if r := v.read(off, 4); r != 0 {
		return r
	}
	a, c := binary.BigEndian.Uint16(v.p[off:]), binary.BigEndian.Uint16(v.p[off+2:])
	if reversed {
		f.VIPPort, f.ClientPort = a, c
	} else {
		f.ClientPort, f.VIPPort = a, c
	}
	return 0
}

// parseL4 reads a TCP (20-byte minimum header) or UDP header at off.
func (v *ipView) parseL4(proto uint8, off int, f *Flow) int {
	need := 8
	if proto == 6 {
		need = 20
	}
	if r := v.read(off, need); r != 0 {
		return r
	}
	f.Proto = proto
	v.l4 = off
	return v.ports(off, false, f)
}

func parseIPv4(v *ipView, f *Flow) (ipLen int, icmpErr bool, reason int) {
	p := v.p
	if v.first < 20 {
		return 0, false, abi.CPassMalformed
	}
	hl := int(p[0]&0xf) * 4
	if p[0]>>4 != 4 || hl < 20 {
		return 0, false, abi.CPassMalformed
	}
	tot := int(binary.BigEndian.Uint16(p[2:]))
	if tot < hl || tot > len(p) {
		return 0, false, abi.CPassMalformed
	}
	v.tot = tot
	if binary.BigEndian.Uint16(p[6:])&0x3fff != 0 {
		return 0, false, abi.CPassFragment
	}
	f.Client = netip.AddrFrom4([4]byte(p[12:16]))
	f.VIP = netip.AddrFrom4([4]byte(p[16:20]))
	switch p[9] {
	case 6, 17:
		return tot, false, v.parseL4(p[9], hl, f)
	case 1:
	default:
		return 0, false, abi.CPassProto
	}
	icmp := hl
	if r := v.read(icmp, 8); r != 0 {
		return 0, false, r
	}
	switch p[icmp] {
	case 8: // echo request
		f.Proto, f.Echo = 1, true
		return tot, false, 0
	case 3: // destination unreachable
	default:
		return 0, false, abi.CPassProto
	}
	q := icmp + 8 // the quoted packet, from the VIP to the client
	if r := v.read(q, 20); r != 0 {
		return 0, false, r
	}
	qhl := int(p[q]&0xf) * 4
	if p[q]>>4 != 4 || qhl < 20 {
		return 0, false, abi.CPassMalformed
	}
	if p[q+9] != 6 && p[q+9] != 17 {
		return 0, false, abi.CPassProto
	}
	f.VIP = netip.AddrFrom4([4]byte(p[q+12 : q+16]))
	f.Client = netip.AddrFrom4([4]byte(p[q+16 : q+20]))
	f.Proto = p[q+9]
	if r := v.ports(q+qhl, true, f); r != 0 {
		return 0, false, r
	}
	v.l4 = q + qhl
	return tot, true, 0
}

func isExt(nh uint8) bool { return nh == 0 || nh == 43 || nh == 60 }

func parseIPv6(v *ipView, f *Flow) (ipLen int, icmpErr bool, reason int) {
	p := v.p
	if v.first < 40 {
		return 0, false, abi.CPassMalformed
	}
	if p[0]>>4 != 6 {
		return 0, false, abi.CPassMalformed
	}
	tot := 40 + int(binary.BigEndian.Uint16(p[4:]))
	if tot > len(p) {
		return 0, false, abi.CPassMalformed
	}
	v.tot = tot
	f.Client = netip.AddrFrom16([16]byte(p[8:24]))
	f.VIP = netip.AddrFrom16([16]byte(p[24:40]))
	nh := p[6]
	off := 40
	for i := 0; i < 4 && isExt(nh); i++ {
		if r := v.read(off, 2); r != 0 {
			return 0, false, r
		}
		nh = p[off]
		off += (int(p[off+1]) + 1) * 8
	}
	if isExt(nh) {
		return 0, false, abi.CPassIPv6Ext
	}
	if nh == 44 {
		return 0, false, abi.CPassFragment
	}
	if off > tot {
		return 0, false, abi.CPassMalformed
	}
	switch nh {
	case 6, 17:
		return tot, false, v.parseL4(nh, off, f)
	case 58:
	default:
		return 0, false, abi.CPassProto
	}
	if r := v.read(off, 8); r != 0 {
		return 0, false, r
	}
	switch p[off] {
	case 128: // echo request
		f.Proto, f.Echo = 58, true
		return tot, false, 0
	case 2: // packet too big
	default:
		return 0, false, abi.CPassProto
	}
	q := off + 8
	if r := v.read(q, 40); r != 0 {
		return 0, false, r
	}
	if p[q]>>4 != 6 {
		return 0, false, abi.CPassMalformed
	}
	if p[q+6] != 6 && p[q+6] != 17 {
		return 0, false, abi.CPassProto
	}
	f.VIP = netip.AddrFrom16([16]byte(p[q+8 : q+24]))
	f.Client = netip.AddrFrom16([16]byte(p[q+24 : q+40]))
	f.Proto = p[q+6]
	if r := v.ports(q+40, true, f); r != 0 {
		return 0, false, r
	}
	v.l4 = q + 40
	return tot, true, 0
}
