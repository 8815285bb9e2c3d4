// Package model is a Go reference model of the XDP datapath: the same
// parse, bind lookup, hash, row choice and encapsulation, written from the
// definitions rather than from the C, and kept plain: no caches, no
// memos. Tests run packets through both the kernel program and this model
// and require identical verdicts, reasons, bytes and counters. It needs no
// kernel, so replays can also run on it alone; internal/datapath/classify is its fast
// per-flow form, tested equal to it.
package model

import (
	"encoding/binary"
	"net/netip"
	"os"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/table"
)

// Verdicts, as XDP numbers them (enum xdp_action).
const (
	XDPPass = abi.XDPPass
	XDPTX   = abi.XDPTX
)

// The counters a Result names (Reason, TooBig) are bpf/abi's, enum
// dir_counter's one Go name each: abi.CPassNotIP and the rest.

// The path MTU check (bpf/toobig.h, docs/wire.md "Path MTU"): an outer
// packet of up to MTUFloor bytes is never checked; a reply quotes the
// first TooBigQuote bytes of the packet.
const (
	MTUFloor    = 1280
	TooBigQuote = 128
)

// Datapath is a configured director.
type Datapath struct {
	Config     table.DirectorConfig
	GatewayMAC [6]byte
	Configured bool
	// DeviceMTU is the MTU of the interface the program runs on, what
	// bpf_check_mtu reads; 0 is BPF_PROG_RUN's loopback's, 65,536.
	DeviceMTU int
	Tables    []*table.Table
	// Histories are the tables' histories (table.History), by table; nil,
	// or a nil entry, for none: the earlier primaries a row lists after
	// its other hops.
	Histories []*table.History
	refs      []table.BindRef
}

// New makes a datapath serving tables.
func New(cfg table.DirectorConfig, gateway [6]byte, tables []*table.Table) *Datapath {
	return &Datapath{Config: cfg, GatewayMAC: gateway, Configured: true, Tables: tables, refs: table.Refs(tables)}
}

// Result is what happened to one frame.
type Result struct {
	Verdict int
	Reason  int // the pass counter, for XDPPass
	// GLB is GLBUnknownFormat, GLBNoMatchingBind or GLBMatched for a
	// frame passed for a Pass reason (not an error): what GLB's director
	// would have counted it as (GLBResult). It belongs to the frame (a
	// VLAN tag decides it), not the flow.
	GLB int
	Out []byte // the frame as it leaves: encapsulated for XDPTX, unchanged for XDPPass
	// Matched is set when a bind took the packet: Bind is its index in
	// table.Refs of the tables, Table the table it selects. What follows
	// may still pass it (no config, echo forwarding off, too big).
	Matched bool
	Bind    int
	Table   int
	// Hashed is set when the flow's row was looked up: Row, and AltRow
	// (the alt_hash_fields row, or -1). Every XDP_TX result is.
	Hashed bool
	Row    int
	AltRow int
	// HopList[:NHops] are the hops, primary first: 2, or 4 with
	// alt_hash_fields, then the row's earlier primaries (up to
	// table.HistoryHops). An array, so that classifying allocates nothing.
	HopList [gue.MaxHops]netip.Addr
	NHops   int
	IPLen   int // length of the original IP packet
	// Parsed packets reached the bind lookup; for them, the flow as seen
	// from the client.
	Parsed     bool
	Client     netip.Addr
	ClientPort uint16
	VIP        netip.Addr
	Proto      uint8
	VIPPort    uint16
	Echo       bool
	// OuterLen is the encapsulated packet's length up to the end of the
	// outer IP packet (trailing Ethernet padding excluded); 0 for a
	// too-big reply.
	OuterLen int
	// TooBig is, for a packet its encapsulation takes over the link's
	// MTU, CounterICMPTooBig when Out is the ICMP reply to the client
	// (XDP_TX, nothing sent to the hops), or CounterTooBigEncap when it
	// is encapsulated all the same; 0 for any other.
	TooBig int
	// QUIC is, for a UDP packet of a table with QUIC-LB routing, the
	// counter it was counted under: QUICRouted when its connection ID
	// chose the primary (HopList[0]), else the reason the row did; 0 for
	// any other packet. An ICMP error quoting a UDP packet of such a
	// table is routed by the connection ID of the packet it quotes
	// (QUICRouteQuoted): QUICICMP, and counted as QUICICMPRouted too when
	// that ID chose the primary.
	QUIC     int
	QUICICMP bool
	// QUICConfig is, where QUIC is not 0, the config rotation bits of the
	// connection ID read (0 to 7), or QUICNoID: the table's QUIC counters
	// are kept by it.
	QUICConfig int
}

// QUICICMPRouted counts, of QUICRouted, the ICMP errors sent by the ID of
// the packet they quote.
const QUICICMPRouted = abi.CQUICICMPRouted

// Hops is HopList[:NHops].
func (r *Result) Hops() []netip.Addr { return r.HopList[:r.NHops] }

// Flow is a packet's flow seen from the client: what steering depends on,
// beside the packet's own lengths and bytes.
type Flow struct {
	Client, VIP         netip.Addr
	ClientPort, VIPPort uint16
	Proto               uint8 // TCP or UDP; ICMP or ICMPv6 for echo requests
	Echo                bool  // an ICMP echo request
}

// Process runs one frame through the datapath.
func (d *Datapath) Process(frame []byte) Result { return d.process(frame, true) }

// Classify is Process without building the encapsulated frame (Out is nil
// for XDP_TX): all a replay needs to know where a packet goes.
func (d *Datapath) Classify(frame []byte) Result { return d.process(frame, false) }

// TableOf is the table a flow's bind selects: the longest prefix that
// matches it (table.ResolveBind).
func (d *Datapath) TableOf(f *Flow) (int, bool) {
	return table.ResolveBind(d.refs, f.VIP, table.Proto(f.Proto), f.VIPPort, f.Echo)
}

// BindTable is the table bind (BindOf's answer) selects.
func (d *Datapath) BindTable(bind int) int { return d.refs[bind].Table }

// BindOf is the bind that takes a flow, as its index in table.Refs of the
// tables (table.MatchingBind): TableOf's answer comes from it.
func (d *Datapath) BindOf(f *Flow) (int, bool) {
	return table.MatchingBind(d.refs, f.VIP, table.Proto(f.Proto), f.VIPPort, f.Echo)
}

// ParseFlow reads a frame up to its flow: the flow and 0, or the reason
// the frame is passed without one. It depends on no config.
func ParseFlow(frame []byte) (Flow, int) {
	var f Flow
	_, reason := parseFrame(frame, &f)
	return f, reason
}

// SteerFlow is what happens to a packet of flow f, less what belongs to
// the packet itself (its bytes and lengths: Out is nil, IPLen and
// OuterLen are zero). bindOf answers the bind lookup: BindOf, or a
// memo of it.
func (d *Datapath) SteerFlow(f *Flow, bindOf func(*Flow) (int, bool)) Result {
	r := d.steer(&packet{}, f, false, bindOf)
	r.OuterLen = 0
	return r
}

// How frames reach the program in BPF_PROG_RUN, which replays and tests
// run it with: the first FirstBuffer bytes of a frame in its first
// buffer, where the program reads them directly, and the rest in page-sized
// fragments (a multi-buffer frame, as a NIC with a jumbo MTU delivers),
// MaxFrame bytes at most. FirstBuffer is a page less XDP_PACKET_HEADROOM
// (256) and struct skb_shared_info (320): 3,520 bytes with 4 KiB pages.
// MaxFrame allows MAX_SKB_FRAGS (17) fragments.
var (
	FirstBuffer = os.Getpagesize() - 256 - 320
	MaxFrame    = FirstBuffer + 17*os.Getpagesize()
)

// passed is the Result of a passed frame.
func (d *Datapath) passed(frame []byte, reason int, parsed bool, f *Flow) Result {
	r := Result{Verdict: XDPPass, Reason: reason, Out: frame, Parsed: parsed, Client: f.Client, ClientPort: f.ClientPort,
		VIP: f.VIP, Proto: f.Proto, VIPPort: f.VIPPort, Echo: f.Echo}
	if frame != nil && reason != abi.CErrNoConfig && reason != abi.CErrNoTable && reason != abi.CErrAdjustHead && reason != abi.CErrBounds {
		r.GLB = d.GLBResult(frame[:min(len(frame), FirstBuffer)])
	}
	return r
}

func (d *Datapath) process(frame []byte, build bool) Result {
	var f Flow
	pk, reason := parseFrame(frame, &f)
	if reason != 0 {
		return d.passed(frame, reason, false, &f)
	}
	return d.steer(&pk, &f, build, d.BindOf)
}

// steer is what happens to a parsed frame. Apart from the frame's own
// lengths and bytes, and for a table with QUIC-LB routing the connection
// ID a UDP packet carries, it depends only on the flow.
func (d *Datapath) steer(pk *packet, f *Flow, build bool, bindOf func(*Flow) (int, bool)) Result {
	frame, l2len, ipLen, v6, icmpErr := pk.frame, pk.l2len, pk.ipLen, pk.v6, pk.icmpErr
	bind, ok := bindOf(f)
	if !ok {
		return d.passed(frame, abi.CPassNoBind, true, f)
	}
	ti := d.refs[bind].Table
	// passedHere is a frame passed once its bind is known: what the
	// program found so far goes with it.
	passedHere := func(reason, row, altRow int, hashed bool) Result {
		r := d.passed(frame, reason, true, f)
		r.Matched, r.Bind, r.Table = true, bind, ti
		r.Hashed, r.Row, r.AltRow = hashed, row, altRow
		return r
	}
	if !d.Configured {
		return passedHere(abi.CErrNoConfig, 0, 0, false)
	}
	t := d.Tables[ti]
	h, row, altRow, hops, nhops := d.lookup(t, f)
	if f.Echo && !d.Config.ForwardICMPEcho {
		return passedHere(abi.CPassICMPEchoOff, row, altRow, true)
	}
	// A table of IPv6 backends goes over IPv6, whose payload length holds
	// its encapsulation but the outer header.
	under6 := !t.Backends[0].IP.Is4()
	if under6 && ipLen > 0xffff-(gue.Size6(gue.MaxHops)-40) {
		return passedHere(abi.CPassTooBig, row, altRow, true)
	}
	quic, quicConfig := 0, 0
	if t.QUIC.On() && f.Proto == 17 && pk.l4 != 0 {
		// The backend the connection ID names goes first, the row's
		// primary second (its secondary where that is the same one).
		// An ICMP error quotes a packet the server sent: the ID that
		// names the server is found in it (QUICRouteQuoted).
		var b int
		quic, b, quicConfig = quicRoute(t, pk.udpPayload(), pk.icmpErr)
		if b >= 0 {
			if r := t.Rows[row]; int(r.Primary) != b {
				hops[1] = hops[0]
			}
			hops[0] = t.Backends[b].IP
		}
	}
	// The row's earlier primaries, after the other hops; the size is
	// checked with the table's longest list, so that every flow of a VIP
	// is told one MTU.
	longest := nhops
	if ti < len(d.Histories) && d.Histories[ti] != nil {
		hist := d.Histories[ti]
		for _, a := range hist.RowHops(row) {
			hops[nhops] = a
			nhops++
		}
		longest += hist.MaxHops
	}
	esize, checked := gue.Size(nhops), gue.Size(longest)
	if under6 {
		esize, checked = gue.Size6(nhops), gue.Size6(longest)
	}
	tooBig := 0
	if ipLen+checked > MTUFloor {
		if mtu := d.LinkMTU(); ipLen+checked > mtu {
			room := 68 // IPv4 takes no MTU under 68
			if mtu > checked+68 {
				room = mtu - checked
			}
			tooBig = abi.CTooBigEncap
			if reply := tooBigReply(frame, l2len, v6, icmpErr, ipLen, room); reply != nil {
				r := Result{Verdict: XDPTX, TooBig: abi.CICMPTooBig, QUIC: quic, QUICICMP: quic != 0 && icmpErr, QUICConfig: quicConfig, Parsed: true, Matched: true, Bind: bind, Table: ti,
					Hashed: true, Row: row, AltRow: altRow, HopList: hops,
					NHops: nhops, IPLen: ipLen, Client: f.Client, ClientPort: f.ClientPort, VIP: f.VIP, Proto: f.Proto, VIPPort: f.VIPPort, Echo: f.Echo}
				if build {
					r.Out = reply
				}
				return r
			}
		}
	}
	var out []byte
	if build {
		sport := 0x8000 | uint16((h^uint64(f.ClientPort))&0x7fff)
		family := 4
		if v6 {
			family = 6
		}
		gw, src := d.GatewayMAC, d.Config.SrcIP
		if under6 {
			src = d.Config.SrcIP6
			if len(d.Config.GatewayMAC6) == 6 {
				gw = [6]byte(d.Config.GatewayMAC6)
			}
		}
		out = encapsulate(frame[:l2len], gw, src, hops[:nhops], sport, family, ipLen, frame[l2len:], uint32(h>>32)&gue.FlowMask)
	}
	return Result{Verdict: XDPTX, Out: out, QUIC: quic, QUICICMP: quic != 0 && icmpErr, QUICConfig: quicConfig, Parsed: true, Matched: true, Bind: bind, Table: ti, Hashed: true,
		Row: row, AltRow: altRow, HopList: hops, NHops: nhops, IPLen: ipLen,
		Client: f.Client, ClientPort: f.ClientPort, VIP: f.VIP, Proto: f.Proto, VIPPort: f.VIPPort, Echo: f.Echo,
		OuterLen: l2len + esize + ipLen, TooBig: tooBig}
}

// lookup is the flow's hash, its row and hops (and with alt_hash_fields
// its alternate row and hops; else altRow is -1), and how many hops that
// is.
func (d *Datapath) lookup(t *table.Table, f *Flow) (h uint64, row, altRow int, hops [gue.MaxHops]netip.Addr, nhops int) {
	h = FlowHash(t.HashKey, *f, d.Config.HashFields)
	row, p, s := t.Lookup(h)
	hops[0], hops[1], nhops = p.IP, s.IP, 2
	altRow = -1
	if d.Config.AltHashFields != 0 {
		var ap, as table.Backend
		altRow, ap, as = t.Lookup(FlowHash(t.HashKey, *f, d.Config.AltHashFields))
		hops[2], hops[3], nhops = ap.IP, as.IP, 4
	}
	return h, row, altRow, hops, nhops
}

// LinkMTU is the MTU GUE packets leave with: the interface's (DeviceMTU),
// or outbound_mtu when smaller.
func (d *Datapath) LinkMTU() int {
	mtu := d.DeviceMTU
	if mtu == 0 {
		mtu = 65536
	}
	if m := d.Config.OutboundMTU; m != 0 && m < mtu {
		mtu = m
	}
	return mtu
}

// tooBigReply is the reply to a packet of ipLen bytes (after l2len bytes
// of L2 header) that its encapsulation takes over the link's MTU, as a
// router on the client's path would send it, telling room: ICMP
// destination unreachable, fragmentation needed (RFC 1191), or ICMPv6
// packet too big (RFC 4443), from the packet's destination (the VIP) to
// its source, through the MACs it came by, quoting its first TooBigQuote
// bytes. nil where the packet goes GLB's way instead, encapsulated: an
// ICMP error (never answered with another), IPv4 without DF (a router
// would fragment it), IPv6 already at the 1,280 bytes no link may ask it
// under, or a quote the first buffer does not hold.
func tooBigReply(frame []byte, l2len int, v6, icmpErr bool, ipLen, room int) []byte {
	ip := frame[l2len:]
	switch {
	case icmpErr:
		return nil
	case v6 && ipLen <= 1280 && room < 1280:
		return nil
	case !v6 && binary.BigEndian.Uint16(ip[6:])&0x4000 == 0:
		return nil
	case min(len(frame), FirstBuffer) < l2len+TooBigQuote:
		return nil
	}
	out := append(append([]byte{}, frame[6:12]...), frame[0:6]...)
	if l2len == 18 {
		out = append(out, frame[12:16]...)
	}
	quote := ip[:TooBigQuote]
	if v6 {
		vip, client := netip.AddrFrom16([16]byte(ip[24:40])), netip.AddrFrom16([16]byte(ip[8:24]))
		icmp := pkt.ICMPv6(vip, client, 2, 0, uint32(max(room, 1280)), quote)
		return append(append(out, 0x86, 0xdd), pkt.IPv6(vip, client, 58, icmp)...)
	}
	vip, client := netip.AddrFrom4([4]byte(ip[16:20])), netip.AddrFrom4([4]byte(ip[12:16]))
	icmp := pkt.ICMP(3, 4, uint32(room&0xffff), quote)
	return append(append(out, 0x08, 0x00), pkt.IPv4(vip, client, 1, icmp, pkt.V4Opts{})...)
}

// FlowHash is GLB's flow hash over the enabled fields, in order: what the
// program computes, and what 'show --lookup' tells an operator.
func FlowHash(key table.Key, f Flow, fields table.HashFields) uint64 {
	var buf [36]byte // two IPv6 addresses and two ports at most
	n := 0
	addr := func(a netip.Addr) {
		if a.Is4() {
			b := a.As4()
			n += copy(buf[n:], b[:])
		} else {
			b := a.As16()
			n += copy(buf[n:], b[:])
		}
	}
	if fields&table.HashSrcAddr != 0 {
		addr(f.Client)
	}
	if fields&table.HashDstAddr != 0 {
		addr(f.VIP)
	}
	if fields&table.HashSrcPort != 0 {
		binary.BigEndian.PutUint16(buf[n:], f.ClientPort)
		n += 2
	}
	if fields&table.HashDstPort != 0 {
		binary.BigEndian.PutUint16(buf[n:], f.VIPPort)
		n += 2
	}
	return table.FlowHash(key, buf[:n])
}

// encapsulate builds GLB's GUE packet: the L2 header with new MACs, then
// the encapsulation (internal/datapath/gue), then everything after the original L2
// header (the IP packet and any trailing padding).
func encapsulate(l2 []byte, gw [6]byte, src netip.Addr, hops []netip.Addr, sport uint16, family, ipLen int, rest []byte, flow uint32) []byte {
	out := make([]byte, 0, len(l2)+gue.Size6(len(hops))+len(rest))
	out = append(out, gw[:]...)
	out = append(out, l2[0:6]...) // source: the frame's destination
	if len(l2) == 18 {
		out = append(out, l2[12:16]...)
	}
	if hops[0].Is6() {
		out = append(out, 0x86, 0xdd)
	} else {
		out = append(out, 0x08, 0x00)
	}
	proto := uint8(gue.ProtoIPv4)
	if family == 6 {
		proto = gue.ProtoIPv6
	}
	h := gue.Header{Src: src, Hops: hops, SourcePort: sport, Proto: proto}
	if hops[0].Is6() {
		h.FlowLabel = flow
	}
	out = h.Append(out, ipLen)
	return append(out, rest...)
}
