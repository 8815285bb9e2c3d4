// Package classify is the model's fast form, for replays: what happens to
// a packet that parses depends only on its flow (and its size), so a
// Classifier works out the bind, hash and row once per flow and remembers
// the flow's fate, where the reference model (internal/datapath/model) works each
// packet out in full. It is tested equal to the reference.
package classify

import (
	"net/netip"

	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/model"
)

// Classifier classifies packets for one goroutine: its memos are its own,
// so goroutines classifying in parallel share no lock or cache line.
type Classifier struct {
	d     *model.Datapath
	binds map[bindQuery]bindAnswer
	flows flowTable
	limit int // how many flows it remembers (maxFlows; less in tests)
}

// FlowID is a flow as one Classifier numbered it: IDs of different
// Classifiers are different flows' even when their numbers agree. The
// zero FlowID is no flow.
type FlowID struct {
	c *Classifier
	n int32 // 1 for the first flow the Classifier saw, 2 for the next...
}

// Valid reports whether id names a flow.
func (id FlowID) Valid() bool { return id.n > 0 }

// Number is id's number, from 1: dense, for indexing by flow.
func (id FlowID) Number() int { return int(id.n) }

// Classifier is the Classifier that numbered id.
func (id FlowID) Classifier() *Classifier { return id.c }

type bindQuery struct {
	vip   netip.Addr
	port  uint16
	proto uint8
	echo  bool
}

type bindAnswer struct {
	bind int
	ok   bool
}

// maxMemo bounds the bind memo: traffic to many addresses just stops
// being memoised.
const maxMemo = 1 << 16

// maxFlows bounds a Classifier's flow memo; later flows are classified
// packet by packet.
const maxFlows = 1 << 24

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
	bind, row, altRow       int32 // bind -1: no bind matched
	hops                    [4]uint32
	verdict, reason, hashed uint8
}

// New returns a Classifier of d for use by one goroutine.
func New(d *model.Datapath) *Classifier {
	return &Classifier{d: d, binds: map[bindQuery]bindAnswer{}, limit: maxFlows}
}

// bindOf is the Datapath's BindOf, memoised.
func (c *Classifier) bindOf(f *model.Flow) (int, bool) {
	q := bindQuery{f.VIP, f.VIPPort, f.Proto, f.Echo}
	if a, hit := c.binds[q]; hit {
		return a.bind, a.ok
	}
	var a bindAnswer
	a.bind, a.ok = c.d.BindOf(f)
	if len(c.binds) < maxMemo {
		c.binds[q] = a
	}
	return a.bind, a.ok
}

// Parsed is a frame parsed up to its flow, which does not depend on any
// config: one parse serves every Classifier, and its Hash can decide
// which of several workers counts the flow. It keeps only the flow:
// replays hand it from one goroutine to another for every packet.
type Parsed struct {
	key    flowKey
	hash   uint64
	reason uint8
}

// Parse parses frame into p.
func Parse(frame []byte, p *Parsed) {
	f, reason := model.ParseFlow(frame)
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

// FlowOf classifies a frame Parse parsed into p (the frame itself is not
// needed): the frame's flow, whose Result FlowResult gives; or no flow and
// the pass reason of a frame that does not parse to one. For a flow it
// had not seen, it sets *first (when not nil) to the flow's Result, as
// FlowResult would give it, and returns fresh: the work is done once. A
// flow it has no room to remember has no ID, and its Result is in *first
// every time.
func (c *Classifier) FlowOf(p *Parsed, first *model.Result) (id FlowID, reason int, fresh bool) {
	if p.reason != 0 {
		return FlowID{}, int(p.reason), false
	}
	rec, n, slot := c.flows.findHashed(&p.key, p.hash)
	if rec != nil {
		return FlowID{c, n}, 0, false
	}
	f := p.key.flow()
	r := c.d.SteerFlow(&f, c.bindOf)
	if c.flows.recs.Len() < c.limit {
		id = FlowID{c, c.remember(slot, &p.key, &r)}
	}
	if first != nil {
		*first = r
	}
	return id, 0, true
}

// FlowResult is the Result of a packet of flow id, without what belongs to
// the packet itself (Out, IPLen, OuterLen and TooBig are zero: whether a
// packet fits the link is its own).
func (c *Classifier) FlowResult(id FlowID) model.Result {
	if id.c != c {
		panic("classify: a FlowID of another Classifier")
	}
	rec := c.flows.recs.At(int(id.n) - 1)
	f := rec.key.flow()
	return c.recall(&rec.fate, &f)
}

// Classify is FlowOf of a frame: its Result (less its bytes and lengths,
// as FlowResult) and its flow's ID.
func (c *Classifier) Classify(frame []byte) (model.Result, FlowID) {
	var p Parsed
	Parse(frame, &p)
	var r model.Result
	id, reason, fresh := c.FlowOf(&p, &r)
	switch {
	case reason != 0:
		f, _ := model.ParseFlow(frame)
		return model.Result{Verdict: model.XDPPass, Reason: reason, Client: f.Client, ClientPort: f.ClientPort,
			VIP: f.VIP, Proto: f.Proto, VIPPort: f.VIPPort, Echo: f.Echo}, id
	case fresh || !id.Valid():
	default:
		r = c.FlowResult(id)
	}
	// Whether a packet fits the link once encapsulated is the packet's
	// own, not its flow's: a packet that may not is worked out in full.
	// So is a UDP packet to a table with QUIC-LB routing, whose
	// connection ID may choose its primary.
	if r.Verdict == model.XDPTX && (len(frame)+gue.Size6(gue.MaxHops) > c.d.LinkMTU() ||
		r.Proto == 17 && c.d.Tables[r.Table].QUIC.On()) {
		r = c.d.Classify(frame)
		r.IPLen, r.OuterLen = 0, 0
	}
	return r, id
}

// flow is the flow k was made from (keyOf).
func (k *flowKey) flow() model.Flow {
	f := model.Flow{Client: netip.AddrFrom16(k.client), VIP: netip.AddrFrom16(k.vip), ClientPort: k.clientPort,
		VIPPort: k.vipPort, Proto: k.proto, Echo: k.echo}
	if k.v4 {
		f.Client, f.VIP = f.Client.Unmap(), f.VIP.Unmap()
	}
	return f
}

func keyOf(f *model.Flow) flowKey {
	return flowKey{client: f.Client.As16(), vip: f.VIP.As16(), clientPort: f.ClientPort, vipPort: f.VIPPort,
		proto: f.Proto, echo: f.Echo, v4: f.Client.Is4()}
}

// remember records the fate a new flow's first packet had and returns the
// flow's number.
func (c *Classifier) remember(slot int, k *flowKey, r *model.Result) int32 {
	ft := fate{verdict: uint8(r.Verdict), reason: uint8(r.Reason), bind: -1}
	if r.Matched {
		ft.bind = int32(r.Bind)
	}
	if r.Hashed {
		ft.hashed = 1
	}
	if r.Verdict == model.XDPTX {
		t := c.d.Tables[r.Table]
		row := t.Rows[r.Row]
		ft.hops = [4]uint32{row.Primary, row.Secondary}
		if r.AltRow >= 0 {
			alt := t.Rows[r.AltRow]
			ft.hops[2], ft.hops[3] = alt.Primary, alt.Secondary
		}
	}
	ft.row, ft.altRow = int32(r.Row), int32(r.AltRow)
	return c.flows.insert(slot, k, ft)
}

// recall rebuilds the Result a flow's first packet had.
func (c *Classifier) recall(ft *fate, f *model.Flow) model.Result {
	r := model.Result{Parsed: true, Client: f.Client, ClientPort: f.ClientPort, VIP: f.VIP, Proto: f.Proto, VIPPort: f.VIPPort, Echo: f.Echo}
	if ft.bind >= 0 {
		r.Matched, r.Bind, r.Table = true, int(ft.bind), c.d.BindTable(int(ft.bind))
	}
	if ft.hashed != 0 {
		r.Hashed, r.Row, r.AltRow = true, int(ft.row), int(ft.altRow)
	}
	if int(ft.verdict) != model.XDPTX {
		r.Verdict, r.Reason = model.XDPPass, int(ft.reason)
		return r
	}
	t := c.d.Tables[r.Table]
	r.Verdict = model.XDPTX
	r.HopList[0], r.HopList[1] = t.Backends[ft.hops[0]].IP, t.Backends[ft.hops[1]].IP
	r.NHops = 2
	if ft.altRow >= 0 {
		r.HopList[2], r.HopList[3] = t.Backends[ft.hops[2]].IP, t.Backends[ft.hops[3]].IP
		r.NHops = 4
	}
	return r
}
