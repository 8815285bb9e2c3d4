// Package model is a Go reference model of the XDP datapath: the same
// parse, bind lookup, hash, row choice and encapsulation, written from the
// definitions rather than from the C. Tests run packets through both the
// kernel program and this model and require identical verdicts and bytes.
// It has no kernel dependencies, so replays can also run on it alone.
package model

import (
	"encoding/binary"
	"net/netip"
	"os"
	"sync"

	"github.com/director/director/bpf"
	"github.com/director/director/table"
	"github.com/director/director/table/gue"
)

// Verdicts, as XDP numbers them (enum xdp_action).
const (
	XDPPass = int(bpf.DirectorXdpActionXDP_PASS)
	XDPTX   = int(bpf.DirectorXdpActionXDP_TX)
)

// The datapath's counters (enum dir_counter in bpf/director.h); the
// reasons a packet is passed are among them.
const (
	CounterProcessed    = int(bpf.DirectorDirCounterDIR_C_PROCESSED)
	CounterMatched      = int(bpf.DirectorDirCounterDIR_C_MATCHED)
	CounterEncapsulated = int(bpf.DirectorDirCounterDIR_C_ENCAPSULATED)
	CounterEncapBytes   = int(bpf.DirectorDirCounterDIR_C_ENCAPSULATED_BYTES)
	BindFast            = int(bpf.DirectorDirCounterDIR_C_BIND_FAST) // found through the exact-match fast path (a performance counter; not modelled)
	PassNotIP           = int(bpf.DirectorDirCounterDIR_C_PASS_NOT_IP)
	PassVLAN            = int(bpf.DirectorDirCounterDIR_C_PASS_VLAN)
	PassMalformed       = int(bpf.DirectorDirCounterDIR_C_PASS_MALFORMED)
	PassFragment        = int(bpf.DirectorDirCounterDIR_C_PASS_FRAGMENT)
	PassIPv6Ext         = int(bpf.DirectorDirCounterDIR_C_PASS_IPV6EXT)
	PassProto           = int(bpf.DirectorDirCounterDIR_C_PASS_PROTO)
	PassICMPEchoOff     = int(bpf.DirectorDirCounterDIR_C_PASS_ICMP_ECHO_OFF)
	PassNoBind          = int(bpf.DirectorDirCounterDIR_C_PASS_NO_BIND)
	PassHeadersSplit    = int(bpf.DirectorDirCounterDIR_C_PASS_HEADERS_SPLIT) // a multi-buffer frame whose headers run past its first buffer
	PassTooBig          = int(bpf.DirectorDirCounterDIR_C_PASS_TOO_BIG)       // the encapsulated packet would be over 65,535 bytes
	ErrNoConfig         = int(bpf.DirectorDirCounterDIR_C_ERROR_NO_CONFIG)
	ErrNoTable          = int(bpf.DirectorDirCounterDIR_C_ERROR_NO_TABLE)
	ErrAdjustHead       = int(bpf.DirectorDirCounterDIR_C_ERROR_ADJUST_HEAD)
	ErrBounds           = int(bpf.DirectorDirCounterDIR_C_ERROR_BOUNDS)
	NumCounters         = int(bpf.DirectorDirCounterDIR_C_MAX)
)

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

// Classifier is Classify for one goroutine. What happens to a packet that
// parses depends only on its flow, so a Classifier remembers each flow's
// fate and works out the bind, hash and row once per flow, not per packet.
// Its memos are its own: goroutines classifying in parallel share no lock
// or cache line.
type Classifier struct {
	d     *Datapath
	binds map[bindQuery]bindAnswer
	flows flowTable
	limit int // how many flows it remembers (maxFlows; less in tests)
}

// flowKey is a flow without pointers, for hashing.
type flowKey struct {
	client, vip         [16]byte
	clientPort, vipPort uint16
	proto               uint8
	echo, v4            bool
}

// fate is a flow's Result, less what belongs to each packet. Hops are
// kept as indexes in the table's backends, so that recalling them touches
// no row.
type fate struct {
	table, row, altRow int32
	hops               [4]uint32
	verdict, reason    uint8
}

// maxFlows bounds a Classifier's flow memo; later flows are classified
// packet by packet.
const maxFlows = 1 << 24

// NewClassifier returns a Classifier of d for use by one goroutine.
func (d *Datapath) NewClassifier() *Classifier {
	return &Classifier{d: d, binds: map[bindQuery]bindAnswer{}, limit: maxFlows}
}

func (c *Classifier) resolve(f flow) (int, bool) {
	q := bindQuery{f.vip, f.vipPort, f.proto, f.echo}
	if a, hit := c.binds[q]; hit {
		return a.table, a.ok
	}
	var a bindAnswer
	a.table, a.ok = table.ResolveBind(c.d.refs, f.vip, table.Proto(f.proto), f.vipPort, f.echo)
	if len(c.binds) < maxMemo {
		c.binds[q] = a
	}
	return a.table, a.ok
}

// Classify is Datapath.Classify, with Result.Flow numbering the flows.
func (c *Classifier) Classify(frame []byte) Result {
	var f flow
	l2len, ipLen, v6, reason := parseFrame(frame, &f)
	if reason != 0 {
		return passed(frame, reason, false, &f)
	}
	k := keyOf(&f)
	rec, id, slot := c.flows.find(&k)
	if rec != nil {
		r := c.recall(&rec.fate, frame, &f, l2len, ipLen)
		r.Flow = int(id)
		return r
	}
	r := c.d.steer(frame, &f, l2len, ipLen, v6, false, c.resolve)
	if c.flows.recs.Len() < c.limit {
		r.Flow = c.remember(slot, &k, &r)
	}
	return r
}

// Parsed is a frame parsed up to its flow, which does not depend on any
// config: one parse serves every Classifier, and its Hash can decide
// which of several workers counts the flow.
// It keeps only the flow: where a frame goes depends on nothing else, and
// replays hand it from one goroutine to another for every packet.
type Parsed struct {
	key    flowKey
	hash   uint64
	reason uint8
}

// Parse parses frame into p.
func Parse(frame []byte, p *Parsed) {
	var f flow
	_, _, _, reason := parseFrame(frame, &f)
	if reason != 0 {
		*p = Parsed{reason: uint8(reason)}
		return
	}
	p.key = keyOf(&f)
	p.hash = p.key.hash()
	p.reason = 0
}

// Reason is the pass reason of a frame that does not parse to a flow, or 0.
func (p *Parsed) Reason() int { return int(p.reason) }

// Hash is a hash of the frame's flow as replay.FlowKey sees it (the
// client and VIP addresses and ports, and the protocol), for frames that
// parse.
func (p *Parsed) Hash() uint64 { return p.hash }

// FlowOf is the least of Classify, for replays, on a frame Parse parsed
// into p (the frame itself is not needed): the number of the frame's flow
// (Result.Flow), whose Result FlowResult gives; or 0 and the pass reason
// of a frame that does not parse to a flow. For a flow it had not seen, it
// sets *first (when not nil) to the flow's Result, as FlowResult would
// give it, and returns fresh true: the work is done once. A flow it has
// no room to remember is -1, with its Result in *first every time.
func (c *Classifier) FlowOf(p *Parsed, first *Result) (id, reason int, fresh bool) {
	if p.reason != 0 {
		return 0, int(p.reason), false
	}
	rec, fid, slot := c.flows.findHashed(&p.key, p.hash)
	if rec != nil {
		return int(fid), 0, false
	}
	f := p.key.flow()
	// The frame's lengths and family matter only to the bytes of its
	// Result (Out, IPLen, OuterLen), which FlowOf leaves out.
	r := c.d.steer(nil, &f, 0, 0, false, false, c.resolve)
	id = -1
	if c.flows.recs.Len() < c.limit {
		id = c.remember(slot, &p.key, &r)
	}
	if first != nil {
		*first = r
		first.Flow, first.Out, first.IPLen, first.OuterLen = max(id, 0), nil, 0, 0
	}
	return id, 0, true
}

// FlowResult is the Result of a packet of flow id (from FlowOf or
// Classify), without what belongs to the packet itself (Out, IPLen and
// OuterLen are zero).
func (c *Classifier) FlowResult(id int) Result {
	rec := c.flows.recs.At(id - 1)
	f := rec.key.flow()
	r := c.recall(&rec.fate, nil, &f, 0, 0)
	r.Flow, r.OuterLen = id, 0
	return r
}

// flow is the flow k was made from (keyOf).
func (k *flowKey) flow() flow {
	f := flow{client: netip.AddrFrom16(k.client), vip: netip.AddrFrom16(k.vip), clientPort: k.clientPort,
		vipPort: k.vipPort, proto: k.proto, echo: k.echo}
	if k.v4 {
		f.client, f.vip = f.client.Unmap(), f.vip.Unmap()
	}
	return f
}

func keyOf(f *flow) flowKey {
	return flowKey{client: f.client.As16(), vip: f.vip.As16(), clientPort: f.clientPort, vipPort: f.vipPort,
		proto: f.proto, echo: f.echo, v4: f.client.Is4()}
}

// remember records the fate steer gave a new flow and returns its number.
func (c *Classifier) remember(slot int, k *flowKey, r *Result) int {
	ft := fate{verdict: uint8(r.Verdict), reason: uint8(r.Reason)}
	if r.Verdict == XDPTX {
		t := c.d.Tables[r.Table]
		ft.table = int32(r.Table)
		row := t.Rows[r.Row]
		ft.hops = [4]uint32{row.Primary, row.Secondary}
		if r.AltRow >= 0 {
			alt := t.Rows[r.AltRow]
			ft.hops[2], ft.hops[3] = alt.Primary, alt.Secondary
		}
	}
	ft.row, ft.altRow = int32(r.Row), int32(r.AltRow)
	return int(c.flows.insert(slot, k, ft))
}

// recall rebuilds the Result steer gave the flow's first packet.
func (c *Classifier) recall(ft *fate, frame []byte, f *flow, l2len, ipLen int) Result {
	if int(ft.verdict) != XDPTX {
		return passed(frame, int(ft.reason), true, f)
	}
	t := c.d.Tables[ft.table]
	r := Result{Verdict: XDPTX, Parsed: true, Table: int(ft.table), Row: int(ft.row), AltRow: int(ft.altRow), IPLen: ipLen,
		Client: f.client, ClientPort: f.clientPort, VIP: f.vip, Proto: f.proto, VIPPort: f.vipPort, Echo: f.echo}
	r.HopList[0], r.HopList[1] = t.Backends[ft.hops[0]].IP, t.Backends[ft.hops[1]].IP
	r.NHops = 2
	if ft.altRow >= 0 {
		r.HopList[2], r.HopList[3] = t.Backends[ft.hops[2]].IP, t.Backends[ft.hops[3]].IP
		r.NHops = 4
	}
	r.OuterLen = l2len + gue.Size(r.NHops) + ipLen
	return r
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
	AltRow  int // the alt_hash_fields row, or -1
	// HopList[:NHops] are the hops, primary first: 2, or 4 with
	// alt_hash_fields. An array, so that classifying allocates nothing.
	HopList [4]netip.Addr
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
	// outer IP packet (trailing Ethernet padding excluded).
	OuterLen int
	// Flow, from a Classifier, numbers the packet's flow: 1 for the first
	// flow it saw, 2 for the next... 0 when the packet did not parse to a
	// flow, or the Classifier remembers no more flows.
	Flow int
}

// Hops is HopList[:NHops].
func (r *Result) Hops() []netip.Addr { return r.HopList[:r.NHops] }

// flow is a packet's flow seen from the client.
type flow struct {
	client, vip         netip.Addr
	clientPort, vipPort uint16
	proto               uint8
	echo                bool
}

// Process runs one frame through the datapath.
func (d *Datapath) Process(frame []byte) Result { return d.process(frame, true, d.resolve) }

// Classify is Process without building the encapsulated frame (Out is nil
// for XDP_TX): all a replay needs to know where a packet goes.
func (d *Datapath) Classify(frame []byte) Result { return d.process(frame, false, d.resolve) }

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

// parseFrame reads a frame up to its flow. A reason other than 0 is the
// pass counter the frame is passed for (f may then be partly filled).
func parseFrame(frame []byte, f *flow) (l2len, ipLen int, v6 bool, reason int) {
	if len(frame) > MaxFrame {
		return 0, 0, false, PassTooBig // no XDP hook receives a frame this large
	}
	if len(frame) < 14 {
		return 0, 0, false, PassMalformed
	}
	etype := binary.BigEndian.Uint16(frame[12:])
	l2len = 14
	switch etype {
	case 0x8100:
		if len(frame) < 18 {
			return 0, 0, false, PassMalformed
		}
		etype = binary.BigEndian.Uint16(frame[16:])
		l2len = 18
		if etype == 0x8100 || etype == 0x88a8 {
			return 0, 0, false, PassVLAN
		}
	case 0x88a8:
		return 0, 0, false, PassVLAN
	}
	// The headers the program reads must lie in the first buffer.
	ip := ipView{p: frame[l2len:], first: min(len(frame), FirstBuffer) - l2len}
	switch etype {
	case 0x0800:
		ipLen, reason = parseIPv4(ip, f)
	case 0x86dd:
		ipLen, reason = parseIPv6(ip, f)
		v6 = true
	default:
		return 0, 0, false, PassNotIP
	}
	// The outer IPv4 length must hold the largest encapsulation and the
	// packet.
	if reason == 0 && ipLen > 0xffff-gue.Size(gue.MaxHops) {
		return 0, 0, false, PassTooBig
	}
	return l2len, ipLen, v6, reason
}

// ipView is an IP packet and the frame after it (p), of which the first
// `first` bytes are in the frame's first buffer.
type ipView struct {
	p     []byte
	first int
	tot   int // the IP packet's length, once known
}

// read checks a read of n bytes at off, as the program's bounds checks do:
// past the IP packet it is malformed; within it but past the first buffer,
// the headers were split.
func (v *ipView) read(off, n int) int {
	switch {
	case off+n > v.tot:
		return PassMalformed
	case off+n > v.first:
		return PassHeadersSplit
	}
	return 0
}

// passed is the Result of a passed frame.
func passed(frame []byte, reason int, parsed bool, f *flow) Result {
	return Result{Verdict: XDPPass, Reason: reason, Out: frame, Parsed: parsed, Client: f.client, ClientPort: f.clientPort,
		VIP: f.vip, Proto: f.proto, VIPPort: f.vipPort, Echo: f.echo}
}

func (d *Datapath) process(frame []byte, build bool, resolve func(flow) (int, bool)) Result {
	var f flow
	l2len, ipLen, v6, reason := parseFrame(frame, &f)
	if reason != 0 {
		return passed(frame, reason, false, &f)
	}
	return d.steer(frame, &f, l2len, ipLen, v6, build, resolve)
}

// steer is what happens to a parsed frame. Apart from the frame's own
// lengths and bytes, it depends only on the flow.
func (d *Datapath) steer(frame []byte, f *flow, l2len, ipLen int, v6, build bool, resolve func(flow) (int, bool)) Result {
	ti, ok := resolve(*f)
	if !ok {
		return passed(frame, PassNoBind, true, f)
	}
	if !d.Configured {
		return passed(frame, ErrNoConfig, true, f)
	}
	if f.echo && !d.Config.ForwardICMPEcho {
		return passed(frame, PassICMPEchoOff, true, f)
	}
	nhops := 2
	if d.Config.AltHashFields != 0 {
		nhops = 4
	}
	t := d.Tables[ti]
	h := flowHash(t.HashKey, *f, d.Config.HashFields)
	row, p, s := t.Lookup(h)
	hops := [4]netip.Addr{p.IP, s.IP}
	altRow := -1
	if d.Config.AltHashFields != 0 {
		var ap, as table.Backend
		altRow, ap, as = t.Lookup(flowHash(t.HashKey, *f, d.Config.AltHashFields))
		hops[2], hops[3] = ap.IP, as.IP
	}
	var out []byte
	if build {
		sport := 0x8000 | uint16((h^uint64(f.clientPort))&0x7fff)
		family := 4
		if v6 {
			family = 6
		}
		out = encapsulate(frame[:l2len], d.GatewayMAC, d.Config.SrcIP, hops[:nhops], sport, family, ipLen, frame[l2len:])
	}
	return Result{Verdict: XDPTX, Out: out, Parsed: true, Table: ti, Row: row, AltRow: altRow, HopList: hops, NHops: nhops, IPLen: ipLen,
		Client: f.client, ClientPort: f.clientPort, VIP: f.vip, Proto: f.proto, VIPPort: f.vipPort, Echo: f.echo,
		OuterLen: l2len + gue.Size(nhops) + ipLen}
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

// ports reads the two ports at off.
func (v *ipView) ports(off int, reversed bool, f *flow) int {
	if r := v.read(off, 4); r != 0 {
		return r
	}
	a, c := binary.BigEndian.Uint16(v.p[off:]), binary.BigEndian.Uint16(v.p[off+2:])
	if reversed {
		f.vipPort, f.clientPort = a, c
	} else {
		f.clientPort, f.vipPort = a, c
	}
	return 0
}

// parseL4 reads a TCP (20-byte minimum header) or UDP header at off.
func (v *ipView) parseL4(proto uint8, off int, f *flow) int {
	need := 8
	if proto == 6 {
		need = 20
	}
	if r := v.read(off, need); r != 0 {
		return r
	}
	f.proto = proto
	return v.ports(off, false, f)
}

func parseIPv4(v ipView, f *flow) (ipLen, reason int) {
	p := v.p
	if v.first < 20 {
		return 0, PassMalformed
	}
	hl := int(p[0]&0xf) * 4
	if p[0]>>4 != 4 || hl < 20 {
		return 0, PassMalformed
	}
	tot := int(binary.BigEndian.Uint16(p[2:]))
	if tot < hl || tot > len(p) {
		return 0, PassMalformed
	}
	v.tot = tot
	if binary.BigEndian.Uint16(p[6:])&0x3fff != 0 {
		return 0, PassFragment
	}
	f.client = netip.AddrFrom4([4]byte(p[12:16]))
	f.vip = netip.AddrFrom4([4]byte(p[16:20]))
	switch p[9] {
	case 6, 17:
		return tot, v.parseL4(p[9], hl, f)
	case 1:
	default:
		return 0, PassProto
	}
	icmp := hl
	if r := v.read(icmp, 8); r != 0 {
		return 0, r
	}
	switch p[icmp] {
	case 8: // echo request
		f.proto, f.echo = 1, true
		return tot, 0
	case 3: // destination unreachable
	default:
		return 0, PassProto
	}
	q := icmp + 8 // the quoted packet, from the VIP to the client
	if r := v.read(q, 20); r != 0 {
		return 0, r
	}
	qhl := int(p[q]&0xf) * 4
	if p[q]>>4 != 4 || qhl < 20 {
		return 0, PassMalformed
	}
	if p[q+9] != 6 && p[q+9] != 17 {
		return 0, PassProto
	}
	f.vip = netip.AddrFrom4([4]byte(p[q+12 : q+16]))
	f.client = netip.AddrFrom4([4]byte(p[q+16 : q+20]))
	f.proto = p[q+9]
	if r := v.ports(q+qhl, true, f); r != 0 {
		return 0, r
	}
	return tot, 0
}

func isExt(nh uint8) bool { return nh == 0 || nh == 43 || nh == 60 }

func parseIPv6(v ipView, f *flow) (ipLen, reason int) {
	p := v.p
	if v.first < 40 {
		return 0, PassMalformed
	}
	if p[0]>>4 != 6 {
		return 0, PassMalformed
	}
	tot := 40 + int(binary.BigEndian.Uint16(p[4:]))
	if tot > len(p) {
		return 0, PassMalformed
	}
	v.tot = tot
	f.client = netip.AddrFrom16([16]byte(p[8:24]))
	f.vip = netip.AddrFrom16([16]byte(p[24:40]))
	nh := p[6]
	off := 40
	for i := 0; i < 4 && isExt(nh); i++ {
		if r := v.read(off, 2); r != 0 {
			return 0, r
		}
		nh = p[off]
		off += (int(p[off+1]) + 1) * 8
	}
	if isExt(nh) {
		return 0, PassIPv6Ext
	}
	if nh == 44 {
		return 0, PassFragment
	}
	if off > tot {
		return 0, PassMalformed
	}
	switch nh {
	case 6, 17:
		return tot, v.parseL4(nh, off, f)
	case 58:
	default:
		return 0, PassProto
	}
	if r := v.read(off, 8); r != 0 {
		return 0, r
	}
	switch p[off] {
	case 128: // echo request
		f.proto, f.echo = 58, true
		return tot, 0
	case 2: // packet too big
	default:
		return 0, PassProto
	}
	q := off + 8
	if r := v.read(q, 40); r != 0 {
		return 0, r
	}
	if p[q]>>4 != 6 {
		return 0, PassMalformed
	}
	if p[q+6] != 6 && p[q+6] != 17 {
		return 0, PassProto
	}
	f.vip = netip.AddrFrom16([16]byte(p[q+8 : q+24]))
	f.client = netip.AddrFrom16([16]byte(p[q+24 : q+40]))
	f.proto = p[q+6]
	if r := v.ports(q+40, true, f); r != 0 {
		return 0, r
	}
	return tot, 0
}

// encapsulate builds GLB's GUE packet: the L2 header with new MACs, then
// the encapsulation (table/gue), then everything after the original L2
// header (the IP packet and any trailing padding).
func encapsulate(l2 []byte, gw [6]byte, src netip.Addr, hops []netip.Addr, sport uint16, family, ipLen int, rest []byte) []byte {
	out := make([]byte, 0, len(l2)+gue.Size(len(hops))+len(rest))
	out = append(out, gw[:]...)
	out = append(out, l2[0:6]...) // source: the frame's destination
	if len(l2) == 18 {
		out = append(out, l2[12:16]...)
	}
	out = append(out, 0x08, 0x00)
	proto := uint8(gue.ProtoIPv4)
	if family == 6 {
		proto = gue.ProtoIPv6
	}
	h := gue.Header{Src: src, Hops: hops, SourcePort: sport, Proto: proto}
	out = h.Append(out, ipLen)
	return append(out, rest...)
}
