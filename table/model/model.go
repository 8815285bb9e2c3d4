// Package model is a Go reference model of the XDP datapath: the same
// parse, bind lookup, hash, row choice and encapsulation, written from the
// definitions rather than from the C. Tests run packets through both the
// kernel program and this model and require identical verdicts and bytes.
// It has no kernel dependencies, so replays can also run on it alone.
package model

import (
	"encoding/binary"
	"net/netip"
	"sync"

	"github.com/director/director/table"
)

// Verdicts, as XDP numbers them.
const (
	XDPPass = 2
	XDPTX   = 3
)

// Reasons a packet is passed, numbered as the datapath's counters (enum
// dir_counter in bpf/director.h; the loader's tests check they agree).
const (
	CounterProcessed = iota
	CounterMatched
	CounterEncapsulated
	CounterEncapBytes
	BindFast // bind found through the exact-match fast path (a performance counter; not modelled)
	PassNotIP
	PassVLAN
	PassMalformed
	PassFragment
	PassIPv6Ext
	PassProto
	PassICMPEchoOff
	PassNoBind
	ErrNoConfig
	ErrNoTable
	ErrAdjustHead
	ErrBounds
	NumCounters
)

// GUEPort is the UDP port GLB's proxies listen on for GUE.
const GUEPort = 19523

// Datapath is a configured director.
type Datapath struct {
	Config     table.DirectorConfig
	GatewayMAC [6]byte
	Configured bool
	Tables     []*table.Table
	refs       []table.BindRef
	// Bind answers are memoised: ResolveBind scans every bind, and a
	// replay asks the same few questions millions of times.
	mu    sync.RWMutex
	binds map[bindQuery]bindAnswer
}

type bindQuery struct {
	vip   netip.Addr
	port  uint16
	proto uint8
	echo  bool
}

type bindAnswer struct {
	table int
	ok    bool
}

// maxMemo bounds the memo: traffic to many addresses just stops being
// memoised.
const maxMemo = 1 << 16

func (d *Datapath) resolve(f flow) (int, bool) {
	q := bindQuery{f.vip, f.vipPort, f.proto, f.echo}
	d.mu.RLock()
	a, hit := d.binds[q]
	d.mu.RUnlock()
	if hit {
		return a.table, a.ok
	}
	a.table, a.ok = table.ResolveBind(d.refs, f.vip, table.Proto(f.proto), f.vipPort, f.echo)
	d.mu.Lock()
	if len(d.binds) < maxMemo {
		d.binds[q] = a
	}
	d.mu.Unlock()
	return a.table, a.ok
}

// New makes a datapath serving tables.
func New(cfg table.DirectorConfig, gateway [6]byte, tables []*table.Table) *Datapath {
	d := &Datapath{Config: cfg, GatewayMAC: gateway, Configured: true, Tables: tables, binds: map[bindQuery]bindAnswer{}}
	for i, t := range tables {
		for _, b := range t.Binds {
			d.refs = append(d.refs, table.BindRef{Table: i, Bind: b})
		}
	}
	return d
}

// Result is what happened to one frame.
type Result struct {
	Verdict int
	Reason  int    // the pass counter, for XDPPass
	Out     []byte // the frame as it leaves: encapsulated for XDPTX, unchanged for XDPPass
	Table   int    // for matched packets
	Row     int
	Hops    []netip.Addr // primary first
	IPLen   int          // length of the original IP packet
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
	// outer IP packet (trailing Ethernet padding excluded).
	OuterLen int
}

// flow is a packet's flow seen from the client.
type flow struct {
	client, vip         netip.Addr
	clientPort, vipPort uint16
	proto               uint8
	echo                bool
}

// Process runs one frame through the datapath.
func (d *Datapath) Process(frame []byte) Result { return d.process(frame, true) }

// Classify is Process without building the encapsulated frame (Out is nil
// for XDP_TX): all a replay needs to know where a packet goes.
func (d *Datapath) Classify(frame []byte) Result { return d.process(frame, false) }

func (d *Datapath) process(frame []byte, build bool) Result {
	var f flow
	parsed := false
	pass := func(reason int) Result {
		return Result{Verdict: XDPPass, Reason: reason, Out: frame, Parsed: parsed, Client: f.client, ClientPort: f.clientPort,
			VIP: f.vip, Proto: f.proto, VIPPort: f.vipPort, Echo: f.echo}
	}
	if len(frame) < 14 {
		return pass(PassMalformed)
	}
	etype := binary.BigEndian.Uint16(frame[12:])
	l2len := 14
	switch etype {
	case 0x8100:
		if len(frame) < 18 {
			return pass(PassMalformed)
		}
		etype = binary.BigEndian.Uint16(frame[16:])
		l2len = 18
		if etype == 0x8100 || etype == 0x88a8 {
			return pass(PassVLAN)
		}
	case 0x88a8:
		return pass(PassVLAN)
	}
	var ipLen, reason int
	switch etype {
	case 0x0800:
		f, ipLen, reason = parseIPv4(frame[l2len:])
	case 0x86dd:
		f, ipLen, reason = parseIPv6(frame[l2len:])
	default:
		return pass(PassNotIP)
	}
	if reason != 0 {
		return pass(reason)
	}
	parsed = true
	ti, ok := d.resolve(f)
	if !ok {
		return pass(PassNoBind)
	}
	if !d.Configured {
		return pass(ErrNoConfig)
	}
	if f.echo && !d.Config.ForwardICMPEcho {
		return pass(PassICMPEchoOff)
	}
	t := d.Tables[ti]
	h := flowHash(t.HashKey, f, d.Config.HashFields)
	row, p, s := t.Lookup(h)
	hops := []netip.Addr{p.IP, s.IP}
	if d.Config.AltHashFields != 0 {
		_, ap, as := t.Lookup(flowHash(t.HashKey, f, d.Config.AltHashFields))
		hops = append(hops, ap.IP, as.IP)
	}
	var out []byte
	if build {
		sport := 0x8000 | uint16((h^uint64(f.clientPort))&0x7fff)
		family := 4
		if etype == 0x86dd {
			family = 6
		}
		out = encapsulate(frame[:l2len], d.GatewayMAC, d.Config.SrcIP, hops, sport, family, ipLen, frame[l2len:])
	}
	return Result{Verdict: XDPTX, Out: out, Parsed: true, Table: ti, Row: row, Hops: hops, IPLen: ipLen,
		Client: f.client, ClientPort: f.clientPort, VIP: f.vip, Proto: f.proto, VIPPort: f.vipPort, Echo: f.echo,
		OuterLen: l2len + 36 + 4*(len(hops)-1) + ipLen}
}

// flowHash is GLB's flow hash over the enabled fields, in order.
func flowHash(key table.Key, f flow, fields table.HashFields) uint64 {
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
		addr(f.client)
	}
	if fields&table.HashDstAddr != 0 {
		addr(f.vip)
	}
	if fields&table.HashSrcPort != 0 {
		binary.BigEndian.PutUint16(buf[n:], f.clientPort)
		n += 2
	}
	if fields&table.HashDstPort != 0 {
		binary.BigEndian.PutUint16(buf[n:], f.vipPort)
		n += 2
	}
	return table.FlowHash(key, buf[:n])
}

func ports(b []byte, reversed bool, f *flow) bool {
	if len(b) < 4 {
		return false
	}
	a, c := binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:])
	if reversed {
		f.vipPort, f.clientPort = a, c
	} else {
		f.clientPort, f.vipPort = a, c
	}
	return true
}

// parseL4 reads a TCP (20-byte minimum header) or UDP header.
func parseL4(proto uint8, l4 []byte, f *flow) int {
	need := 8
	if proto == 6 {
		need = 20
	}
	if len(l4) < need {
		return PassMalformed
	}
	f.proto = proto
	ports(l4, false, f)
	return 0
}

func parseIPv4(p []byte) (f flow, ipLen, reason int) {
	if len(p) < 20 {
		return f, 0, PassMalformed
	}
	hl := int(p[0]&0xf) * 4
	if p[0]>>4 != 4 || hl < 20 {
		return f, 0, PassMalformed
	}
	tot := int(binary.BigEndian.Uint16(p[2:]))
	if tot < hl || tot > len(p) {
		return f, 0, PassMalformed
	}
	ip := p[:tot]
	if binary.BigEndian.Uint16(p[6:])&0x3fff != 0 {
		return f, 0, PassFragment
	}
	f.client = netip.AddrFrom4([4]byte(p[12:16]))
	f.vip = netip.AddrFrom4([4]byte(p[16:20]))
	l4 := ip[hl:]
	switch p[9] {
	case 6, 17:
		return f, tot, parseL4(p[9], l4, &f)
	case 1:
	default:
		return f, 0, PassProto
	}
	if len(l4) < 8 {
		return f, 0, PassMalformed
	}
	switch l4[0] {
	case 8: // echo request
		f.proto, f.echo = 1, true
		return f, tot, 0
	case 3: // destination unreachable
	default:
		return f, 0, PassProto
	}
	q := l4[8:]
	if len(q) < 20 {
		return f, 0, PassMalformed
	}
	qhl := int(q[0]&0xf) * 4
	if q[0]>>4 != 4 || qhl < 20 {
		return f, 0, PassMalformed
	}
	if q[9] != 6 && q[9] != 17 {
		return f, 0, PassProto
	}
	f.vip = netip.AddrFrom4([4]byte(q[12:16]))
	f.client = netip.AddrFrom4([4]byte(q[16:20]))
	f.proto = q[9]
	if qhl > len(q) || !ports(q[qhl:], true, &f) {
		return f, 0, PassMalformed
	}
	return f, tot, 0
}

func isExt(nh uint8) bool { return nh == 0 || nh == 43 || nh == 60 }

func parseIPv6(p []byte) (f flow, ipLen, reason int) {
	if len(p) < 40 {
		return f, 0, PassMalformed
	}
	if p[0]>>4 != 6 {
		return f, 0, PassMalformed
	}
	tot := 40 + int(binary.BigEndian.Uint16(p[4:]))
	if tot > len(p) {
		return f, 0, PassMalformed
	}
	ip := p[:tot]
	f.client = netip.AddrFrom16([16]byte(p[8:24]))
	f.vip = netip.AddrFrom16([16]byte(p[24:40]))
	nh := p[6]
	off := 40
	for i := 0; i < 4 && isExt(nh); i++ {
		if off+2 > tot {
			return f, 0, PassMalformed
		}
		nh = ip[off]
		off += (int(ip[off+1]) + 1) * 8
	}
	if isExt(nh) {
		return f, 0, PassIPv6Ext
	}
	if nh == 44 {
		return f, 0, PassFragment
	}
	if off > tot {
		return f, 0, PassMalformed
	}
	l4 := ip[off:]
	switch nh {
	case 6, 17:
		return f, tot, parseL4(nh, l4, &f)
	case 58:
	default:
		return f, 0, PassProto
	}
	if len(l4) < 8 {
		return f, 0, PassMalformed
	}
	switch l4[0] {
	case 128: // echo request
		f.proto, f.echo = 58, true
		return f, tot, 0
	case 2: // packet too big
	default:
		return f, 0, PassProto
	}
	q := l4[8:]
	if len(q) < 40 {
		return f, 0, PassMalformed
	}
	if q[0]>>4 != 6 {
		return f, 0, PassMalformed
	}
	if q[6] != 6 && q[6] != 17 {
		return f, 0, PassProto
	}
	f.vip = netip.AddrFrom16([16]byte(q[8:24]))
	f.client = netip.AddrFrom16([16]byte(q[24:40]))
	f.proto = q[6]
	if !ports(q[40:], true, &f) {
		return f, 0, PassMalformed
	}
	return f, tot, 0
}

// encapsulate builds GLB's GUE packet: the L2 header with new MACs, outer
// IPv4, UDP, GUE with GLB's private hop list, then everything after the
// original L2 header (the IP packet and any trailing padding).
func encapsulate(l2 []byte, gw [6]byte, src netip.Addr, hops []netip.Addr, sport uint16, family, ipLen int, rest []byte) []byte {
	listed := len(hops) - 1
	esize := 20 + 8 + 4 + 4 + 4*listed
	out := make([]byte, 0, len(l2)+esize+len(rest))
	out = append(out, gw[:]...)
	out = append(out, l2[0:6]...) // source: the frame's destination
	if len(l2) == 18 {
		out = append(out, l2[12:16]...)
	}
	out = append(out, 0x08, 0x00)

	ipsz := esize + ipLen
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(ipsz))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8] = 64
	ip[9] = 17
	s4, d4 := src.As4(), hops[0].As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	binary.BigEndian.PutUint16(ip[10:], Checksum(ip))
	out = append(out, ip...)

	out = binary.BigEndian.AppendUint16(out, sport)
	out = binary.BigEndian.AppendUint16(out, GUEPort)
	out = binary.BigEndian.AppendUint16(out, uint16(ipsz-20))
	out = append(out, 0, 0) // no UDP checksum

	proto := byte(4)
	if family == 6 {
		proto = 41
	}
	out = append(out, byte(1+listed), proto, 0, 0) // GUE: version 0, C 0, hlen; proto; flags
	out = append(out, 0, 0, 0, byte(listed))       // GLB private: type 0, next hop 0, hop count
	for _, h := range hops[1:] {
		a := h.As4()
		out = append(out, a[:]...)
	}
	return append(out, rest...)
}

// Checksum is the Internet checksum of b.
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
