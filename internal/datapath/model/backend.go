package model

import (
	"encoding/binary"
	"net/netip"

	"github.com/director/director/bpf/abi"
)

// The backend program's counters (enum be_counter in bpf/backend.c): the
// reason for what it did with a packet.
const (
	BeDecapSyn         = int(abi.BeCounterBE_C_DECAP_SYN)
	BeDecapKnown       = int(abi.BeCounterBE_C_DECAP_KNOWN)
	BeDecapNotTCP      = int(abi.BeCounterBE_C_DECAP_NOT_TCP)
	BeDecapLastHop     = int(abi.BeCounterBE_C_DECAP_LAST_HOP)
	BeForwarded        = int(abi.BeCounterBE_C_FORWARDED)
	BePassNotGUE       = int(abi.BeCounterBE_C_PASS_NOT_GUE)
	BeDropMalformed    = int(abi.BeCounterBE_C_DROP_MALFORMED)
	BeDropNoRoute      = int(abi.BeCounterBE_C_DROP_NO_ROUTE)
	BeDropNoConfig     = int(abi.BeCounterBE_C_DROP_NO_CONFIG)
	BeDropNotLocal     = int(abi.BeCounterBE_C_DROP_NOT_LOCAL)
	BeForwardStack     = int(abi.BeCounterBE_C_FORWARDED_STACK)
	BeDropUntrusted    = int(abi.BeCounterBE_C_DROP_UNTRUSTED)
	BeDropUntrustedHop = int(abi.BeCounterBE_C_DROP_UNTRUSTED_HOP)
)

// XDPDrop is XDP's drop verdict; the backend program drops what it cannot
// take (the director never does).
const XDPDrop = 1

// BackendConfig is the backend program's settings (struct be_config).
type BackendConfig struct {
	Configured   bool
	Self4, Self6 netip.Addr // invalid: none
	SecondChance bool
	// TrustListed says Trust (be_trust, be_trust6) is the list of the
	// sources GUE is taken from and the next hops it is sent on to;
	// without one, GUE is taken from anyone and never sent on.
	TrustListed bool
	Trust       []netip.Prefix
}

// forwards says whether the program may send GUE on at all.
func (c BackendConfig) forwards() bool { return c.SecondChance && c.TrustListed }

// InPrefixes is an LPM trie's lookup of a whole address: whether a is in
// one of ps.
func InPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// BackendHost is what the backend program reads of its host besides its
// settings: the addresses GUE is accepted for (be_local), the TCP socket
// lookup, and the routing of the next hop (bpf_fib_lookup).
type BackendHost interface {
	// Accepted reports whether GUE (and its inner packet) may be for a:
	// in one of the prefixes the program was given besides Self4/Self6.
	Accepted(a netip.Addr) bool
	// Socket reports whether the host has a TCP socket for the flow
	// from client to vip, and whether that socket is a listener
	// (bpf_skc_lookup_tcp's answer: a connection, or a listener only).
	Socket(client, vip netip.AddrPort) (found, listening bool)
	// Route is how a packet from self to the next hop dst, which came in
	// by the interface the program runs on, leaves (the program's
	// route()).
	Route(self, dst netip.Addr) NextHopRoute
}

// NextHopRoute is how the next hop is reached.
type NextHopRoute struct {
	// How is RouteTX (out of the interface the packet came in by, its
	// neighbour resolved), RouteStack (through the kernel: unresolved,
	// or out another interface) or RouteNone.
	How int
	// Why says what the lookups found, for explain.
	Why string
	// ForwardingOff is set when forwarding is off on the interface: the
	// lookup refuses every next hop, routed or not (RouteNone).
	ForwardingOff bool
}

// NextHopRoute.How's values.
const (
	RouteNone = iota
	RouteTX
	RouteStack
)

// BackendResult is what the backend program does with one frame.
type BackendResult struct {
	Verdict int
	Reason  int  // the be_counter that says why
	GUE6    bool // GUE over IPv6 for this host (counted as gue6 too)
	// SecondChanceIn is GUE for this host that another backend sent on
	// (next hop index above 0; counted as second_chance_in too).
	SecondChanceIn bool
	// For GUE for this host: the outer destination, the hop list and
	// next hop index, and the inner flow (Proto 0 when it could not be
	// read).
	Outer      netip.Addr
	Hops       []netip.Addr
	Next       int
	Proto      uint8
	Client     netip.AddrPort
	VIP        netip.AddrPort
	SYN, ACK   bool
	Socket     bool // a connection was found
	Listener   bool // only a listener was found
	NextHop    netip.Addr
	Route      NextHopRoute
	NoSecond   bool       // second chance is off (decap_last_hop)
	NoTrust    bool       // no trust list: nothing is sent on (decap_last_hop)
	Source     netip.Addr // the outer source
	InnerLocal bool       // the inner destination is one of the host's
}

// Backend runs frame through the backend program's logic (bpf/backend.c),
// asking host what the program asks the kernel.
func Backend(cfg BackendConfig, host BackendHost, frame []byte) BackendResult {
	notGUE := BackendResult{Verdict: XDPPass, Reason: BePassNotGUE}
	if len(frame) < 14 {
		return notGUE
	}
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x86dd:
		return backend6(cfg, host, frame)
	case 0x0800:
	default:
		return notGUE
	}
	ip := frame[14:]
	if len(ip) < 20 || ip[0]>>4 != 4 || ip[0]&0xf != 5 || ip[9] != 17 {
		return notGUE
	}
	if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
		return notGUE
	}
	udp := ip[20:]
	if len(udp) < 8 || binary.BigEndian.Uint16(udp[2:]) != abi.GUEPort {
		return notGUE
	}
	if !cfg.Configured {
		return BackendResult{Verdict: XDPDrop, Reason: BeDropNoConfig}
	}
	dst := netip.AddrFrom4([4]byte(ip[16:20]))
	if !local4(cfg, host, dst) {
		return notGUE
	}
	r := BackendResult{Outer: dst, Source: netip.AddrFrom4([4]byte(ip[12:16]))}
	if cfg.TrustListed && !InPrefixes(cfg.Trust, r.Source) {
		return r.drop(BeDropUntrusted)
	}
	g := udp[8:]
	if len(g) < 8 {
		return r.drop(BeDropMalformed)
	}
	hlen, proto, next, count := int(g[0]&abi.GUEHlenMask), g[1], int(g[6]), int(g[7])
	if g[0]>>abi.GUEHlenVCShift != 0 || binary.BigEndian.Uint16(g[4:]) != abi.GUEPrivateTypeGLB || count > abi.GUEMaxHops-1 ||
		hlen != 1+count || (proto != 4 && proto != 41) {
		return r.drop(BeDropMalformed)
	}
	r.Next, r.SecondChanceIn = next, next > 0
	for i := 0; i < count && 8+4*i+4 <= len(g); i++ {
		r.Hops = append(r.Hops, netip.AddrFrom4([4]byte(g[8+4*i:])))
	}
	inner := g[min(4+4*hlen, len(g)):]
	if !r.localOrNext(cfg, host, inner, proto) {
		return r
	}
	if next >= count || !cfg.forwards() {
		r.NoSecond, r.NoTrust = !cfg.SecondChance, cfg.SecondChance && !cfg.TrustListed
		return r.pass(BeDecapLastHop)
	}
	if next > abi.GUEMaxHops-2 || len(g) < 8+4*(next+1) {
		return r.drop(BeDropMalformed)
	}
	return r.forward(cfg, cfg.Self4, netip.AddrFrom4([4]byte(g[8+4*next:])), host)
}

func backend6(cfg BackendConfig, host BackendHost, frame []byte) BackendResult {
	notGUE := BackendResult{Verdict: XDPPass, Reason: BePassNotGUE}
	ip := frame[14:]
	if len(ip) < 40 || ip[0]>>4 != 6 || ip[6] != 17 {
		return notGUE
	}
	udp := ip[40:]
	if len(udp) < 8 || binary.BigEndian.Uint16(udp[2:]) != abi.GUEPort {
		return notGUE
	}
	if !cfg.Configured {
		return BackendResult{Verdict: XDPDrop, Reason: BeDropNoConfig}
	}
	dst := netip.AddrFrom16([16]byte(ip[24:40]))
	if !local6(cfg, host, dst) {
		return notGUE
	}
	r := BackendResult{Outer: dst, GUE6: true, Source: netip.AddrFrom16([16]byte(ip[8:24]))}
	if cfg.TrustListed && !InPrefixes(cfg.Trust, r.Source) {
		return r.drop(BeDropUntrusted)
	}
	g := udp[8:]
	if len(g) < 8 {
		return r.drop(BeDropMalformed)
	}
	hlen, proto, next, count := int(g[0]&abi.GUEHlenMask), g[1], int(g[6]), int(g[7])
	if g[0]>>abi.GUEHlenVCShift != 0 || binary.BigEndian.Uint16(g[4:]) != abi.GUEPrivateTypeV6 || count > abi.GUEMaxHops-1 ||
		hlen != 1+4*count || (proto != 4 && proto != 41) {
		return r.drop(BeDropMalformed)
	}
	r.Next, r.SecondChanceIn = next, next > 0
	for i := 0; i < count && 8+16*i+16 <= len(g); i++ {
		r.Hops = append(r.Hops, netip.AddrFrom16([16]byte(g[8+16*i:])))
	}
	inner := g[min(4+4*hlen, len(g)):]
	if !r.localOrNext(cfg, host, inner, proto) {
		return r
	}
	if next >= count || !cfg.forwards() || !cfg.Self6.IsValid() || cfg.Self6.IsUnspecified() {
		r.NoSecond, r.NoTrust = !cfg.SecondChance, cfg.SecondChance && !cfg.TrustListed
		return r.pass(BeDecapLastHop)
	}
	if next > abi.GUEMaxHops-2 || len(g) < 8+16*(next+1) {
		return r.drop(BeDropMalformed)
	}
	return r.forward(cfg, cfg.Self6, netip.AddrFrom16([16]byte(g[8+16*next:])), host)
}

// localOrNext is the program's local_or_next: it decides r (returning
// false) when the inner packet is broken, not for this host, or taken
// here; true leaves it to the next hop.
func (r *BackendResult) localOrNext(cfg BackendConfig, host BackendHost, inner []byte, proto uint8) bool {
	var tcp []byte
	if proto == 4 {
		if len(inner) < 20 || inner[0]>>4 != 4 || inner[0]&0xf < 5 {
			*r = r.drop(BeDropMalformed)
			return false
		}
		src, dst := netip.AddrFrom4([4]byte(inner[12:16])), netip.AddrFrom4([4]byte(inner[16:20]))
		r.Proto, r.Client, r.VIP = inner[9], netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		if !local4(cfg, host, dst) {
			*r = r.drop(BeDropNotLocal)
			return false
		}
		r.InnerLocal = true
		if inner[9] != 6 {
			*r = r.pass(BeDecapNotTCP)
			return false
		}
		if off := int(inner[0]&0xf) * 4; len(inner) >= off+20 {
			tcp = inner[off:]
		}
	} else {
		if len(inner) < 40 || inner[0]>>4 != 6 {
			*r = r.drop(BeDropMalformed)
			return false
		}
		src, dst := netip.AddrFrom16([16]byte(inner[8:24])), netip.AddrFrom16([16]byte(inner[24:40]))
		r.Proto, r.Client, r.VIP = inner[6], netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		if !local6(cfg, host, dst) {
			*r = r.drop(BeDropNotLocal)
			return false
		}
		r.InnerLocal = true
		if inner[6] != 6 {
			*r = r.pass(BeDecapNotTCP)
			return false
		}
		if len(inner) >= 60 {
			tcp = inner[40:]
		}
	}
	if tcp == nil {
		*r = r.drop(BeDropMalformed)
		return false
	}
	r.Client = netip.AddrPortFrom(r.Client.Addr(), binary.BigEndian.Uint16(tcp[0:]))
	r.VIP = netip.AddrPortFrom(r.VIP.Addr(), binary.BigEndian.Uint16(tcp[2:]))
	r.SYN, r.ACK = tcp[13]&0x02 != 0, tcp[13]&0x10 != 0
	if r.SYN && !r.ACK {
		*r = r.pass(BeDecapSyn)
		return false
	}
	r.Socket, r.Listener = host.Socket(r.Client, r.VIP)
	if r.Socket && !r.Listener {
		*r = r.pass(BeDecapKnown)
		return false
	}
	return true
}

func (r BackendResult) forward(cfg BackendConfig, self, dst netip.Addr, host BackendHost) BackendResult {
	r.NextHop = dst
	if !InPrefixes(cfg.Trust, dst) {
		return r.drop(BeDropUntrustedHop)
	}
	r.Route = host.Route(self, dst)
	switch r.Route.How {
	case RouteTX:
		r.Verdict, r.Reason = XDPTX, BeForwarded
	case RouteStack:
		r.Verdict, r.Reason = XDPPass, BeForwardStack
	default:
		return r.drop(BeDropNoRoute)
	}
	return r
}

func (r BackendResult) drop(reason int) BackendResult {
	r.Verdict, r.Reason = XDPDrop, reason
	return r
}

func (r BackendResult) pass(reason int) BackendResult {
	r.Verdict, r.Reason = XDPPass, reason
	return r
}

// local4 is the program's test of an IPv4 destination: self_ip (0.0.0.0
// when it has none) or be_local.
func local4(cfg BackendConfig, host BackendHost, a netip.Addr) bool {
	self := cfg.Self4
	if !self.IsValid() {
		self = netip.IPv4Unspecified()
	}
	return a == self || host.Accepted(a)
}

// local6 is local4 for IPv6: self_ip6 (:: when none) or be_local6.
func local6(cfg BackendConfig, host BackendHost, a netip.Addr) bool {
	self := cfg.Self6
	if !self.IsValid() {
		self = netip.IPv6Unspecified()
	}
	return a == self || host.Accepted(a)
}
