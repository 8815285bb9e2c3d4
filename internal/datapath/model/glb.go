package model

import (
	"encoding/binary"
	"net/netip"

	"github.com/director/director/bpf/abi"
)

// GLBResult is what GLB's XDP director (its glb_encap.c with glb-hashing's
// packet_parsing.h) would count a frame as, given the frame's first
// buffer. Its parser knows only the IPv4 and IPv6 ethertypes (a VLAN tag is
// unknown to it), takes an IPv4 header as 20 bytes and reads no IPv6
// extension header; past the IP header it needs the ports, or an ICMP
// header (8 bytes for IPv4, 4 for ICMPv6) and, for IPv4's destination
// unreachable and ICMPv6's packet too big, the quoted IP header and its
// ports (after the 4-byte MTU, for ICMPv6), which it reads reversed. A
// frame it cannot read is GLBUnknownFormat. Otherwise it looks up the
// destination, protocol and port, ICMP with port 0 (bound only while echo
// is forwarded): GLBMatched, or GLBNoMatchingBind.
func (d *Datapath) GLBResult(frame []byte) int {
	if len(frame) < 14 {
		return abi.CGLBUnknownFormat
	}
	var f Flow
	icmp := false
	var ports []byte
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800:
		if len(frame) < 14+20+4 {
			return abi.CGLBUnknownFormat
		}
		ip := frame[14:]
		f.Proto, f.VIP, ports = ip[9], netip.AddrFrom4([4]byte(ip[16:20])), ip[20:24]
		if f.Proto == 1 {
			if len(frame) < 14+20+8 {
				return abi.CGLBUnknownFormat
			}
			icmp = true
			if ip[20] == 3 { // destination unreachable: the quoted packet, reversed
				if len(frame) < 14+20+8+20+4 {
					return abi.CGLBUnknownFormat
				}
				q := ip[28:]
				icmp, f.Proto, f.VIP, ports = false, q[9], netip.AddrFrom4([4]byte(q[12:16])), []byte{0, 0, q[20], q[21]}
			}
		}
	case 0x86dd:
		if len(frame) < 14+40+4 {
			return abi.CGLBUnknownFormat
		}
		ip := frame[14:]
		f.Proto, f.VIP, ports = ip[6], netip.AddrFrom16([16]byte(ip[24:40])), ip[40:44]
		if f.Proto == 58 {
			icmp = true
			if ip[40] == 2 { // packet too big: the quoted packet, reversed
				if len(frame) < 14+40+8+40+4 {
					return abi.CGLBUnknownFormat
				}
				q := ip[48:]
				icmp, f.Proto, f.VIP, ports = false, q[6], netip.AddrFrom16([16]byte(q[8:24])), []byte{0, 0, q[40], q[41]}
			}
		}
	default:
		return abi.CGLBUnknownFormat
	}
	if !icmp {
		f.VIPPort = binary.BigEndian.Uint16(ports[2:])
	}
	// GLB binds ICMP at port 0, only while echo is forwarded, to the
	// addresses of the other binds: an echo request's lookup.
	if (f.VIP.Is4() && f.Proto == 1) || (f.VIP.Is6() && f.Proto == 58) {
		if f.VIPPort != 0 || !d.Config.ForwardICMPEcho {
			return abi.CGLBNoMatching
		}
		f.Echo = true
	}
	if _, ok := d.TableOf(&f); ok {
		return abi.CGLBMatched
	}
	return abi.CGLBNoMatching
}
