// Package explain says what the director's datapath does with one packet,
// and why: the bind it matched (or why none did), the hash inputs, the
// table, row and hops with each hop's state and health, the action with
// its reason, and the bytes it sends. It answers from the reference model
// (internal/datapath/model) configured with what is live, so what it
// predicts is what the kernel program does; cmd/director's tests hold the
// two to that on generated traffic.
package explain

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/table"
)

// Director is what the director does with one frame.
type Director struct {
	Packet string `json:"packet"` // the frame, described
	// Flow is the flow as the datapath read it, from the client; nil for
	// a frame passed before the bind lookup.
	Flow *Flow `json:"flow,omitempty"`
	// Bind is the bind the flow matched; NoBind says why none did.
	Bind   *Bind  `json:"bind,omitempty"`
	NoBind string `json:"no_bind,omitempty"`
	// Hash, Row and Hops are the steering of a matched flow.
	Hash *Hash `json:"hash,omitempty"`
	Hops []Hop `json:"hops,omitempty"`
	// QUIC is, for UDP to a table with QUIC-LB routing, the counter the
	// connection ID was counted under (quic_routed, or why the row chose).
	QUIC string `json:"quic,omitempty"`
	// Verdict is the XDP action (XDP_TX, XDP_PASS); Action says what that
	// means here (encapsulate, pass, icmp_too_big) and Counter the datapath
	// counter the packet moves that says why (encapsulated, pass_no_bind,
	// icmp_too_big, ...). Why says it in words.
	Verdict string `json:"verdict"`
	Action  string `json:"action"`
	Counter string `json:"counter"`
	Why     string `json:"why"`
	// LinkMTU is the MTU the encapsulated packet was checked against.
	LinkMTU int `json:"link_mtu,omitempty"`
	// Out is the frame the program sends (XDP_TX) or hands to the stack
	// (XDP_PASS), and OutPacket describes it.
	Out       Bytes  `json:"out"`
	OutPacket string `json:"out_packet"`
}

// Flow is a flow as the datapath reads it.
type Flow struct {
	Proto      string `json:"proto"`
	Client     string `json:"client"`
	ClientPort uint16 `json:"client_port"`
	VIP        string `json:"vip"`
	VIPPort    uint16 `json:"vip_port"`
}

// Bind is the bind a flow matched, and its table.
type Bind struct {
	Table      string `json:"table"`
	TableIndex int    `json:"table_index"`
	Bind       string `json:"bind"`
	BindIndex  int    `json:"bind_index"`
}

// Hash is how the flow chose its row: the director config's hash fields,
// the values of the flow's that they take, and the row (and, with
// alt_hash_fields, the alternate ones and row). The hash key is not shown.
type Hash struct {
	Fields    string   `json:"fields"`
	Inputs    []string `json:"inputs"`
	Row       int      `json:"row"`
	AltFields string   `json:"alt_fields,omitempty"`
	AltInputs []string `json:"alt_inputs,omitempty"`
	AltRow    *int     `json:"alt_row,omitempty"`
}

// Hop is one address of the hop list, primary first.
type Hop struct {
	Role    string `json:"role"` // primary, secondary, alt primary, alt secondary
	Addr    string `json:"addr"`
	Backend int    `json:"backend"` // position in the table's backends
	State   string `json:"state"`
	Healthy bool   `json:"healthy"`
	Weight  int    `json:"weight"`
	// ByCID is set on a hop a QUIC connection ID chose.
	ByCID bool `json:"by_connection_id,omitempty"`
}

// Bytes is a frame, hex in JSON.
type Bytes []byte

// MarshalText is b in hex.
func (b Bytes) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(b)), nil }

// Explain runs frame through dp (configured with what is live, its
// DeviceMTU the interface's) and says what happened and why.
func Explain(dp *model.Datapath, frame []byte) Director {
	r := dp.Process(frame)
	e := Director{Packet: pkt.Describe(frame), Out: r.Out, OutPacket: pkt.Describe(r.Out), Verdict: verdictName(r.Verdict)}
	if r.Parsed {
		e.Flow = &Flow{Proto: protoName(r.Proto, r.Echo), Client: r.Client.String(), ClientPort: r.ClientPort, VIP: r.VIP.String(), VIPPort: r.VIPPort}
	}
	if r.Verdict == model.XDPPass {
		e.Action, e.Counter = "pass", abi.DirectorCounterNames[r.Reason]
		e.Why = passWhy[r.Reason]
		if r.Reason == abi.CPassNoBind {
			e.NoBind = noBindWhy(dp.Tables, r)
		}
		if r.Matched {
			e.steering(dp, r)
		}
		return e
	}
	e.steering(dp, r)
	e.LinkMTU = dp.LinkMTU()
	switch r.TooBig {
	case abi.CICMPTooBig:
		e.Action, e.Counter = "icmp_too_big", abi.DirectorCounterNames[r.TooBig]
		e.Why = fmt.Sprintf("encapsulated, it would be over the link's MTU (%d): the client is told the room there is, with ICMP, as a router on its path would (nothing goes to the hops)", e.LinkMTU)
	case abi.CTooBigEncap:
		e.Action, e.Counter = "encapsulate", abi.DirectorCounterNames[r.TooBig]
		e.Why = fmt.Sprintf("encapsulated to the primary, over the link's MTU (%d) all the same: a packet no ICMP too-big may answer (IPv4 without DF, an ICMP error, IPv6 at 1,280 bytes), sent as GLB sends it", e.LinkMTU)
	default:
		e.Action, e.Counter = "encapsulate", abi.DirectorCounterNames[abi.CEncapsulated]
		e.Why = "encapsulated in GUE to the primary, the other hops in its hop list for second chance"
	}
	return e
}

// steering fills in the bind, hash, row and hops of a matched flow, as
// the model found them.
func (e *Director) steering(dp *model.Datapath, r model.Result) {
	t := dp.Tables[r.Table]
	f := model.Flow{Client: r.Client, ClientPort: r.ClientPort, VIP: r.VIP, VIPPort: r.VIPPort, Proto: r.Proto, Echo: r.Echo}
	refs := table.Refs(dp.Tables)
	e.Bind = &Bind{Table: table.DisplayName(t.Name, r.Table), TableIndex: r.Table, Bind: refs[r.Bind].Bind.String(),
		BindIndex: r.Bind - slices.IndexFunc(refs, func(b table.BindRef) bool { return b.Table == r.Table })}
	if !r.Hashed {
		return
	}
	e.Hash = &Hash{Fields: dp.Config.HashFields.String(), Inputs: inputs(f, dp.Config.HashFields), Row: r.Row}
	if dp.Config.AltHashFields != 0 {
		alt := r.AltRow
		e.Hash.AltFields, e.Hash.AltInputs, e.Hash.AltRow = dp.Config.AltHashFields.String(), inputs(f, dp.Config.AltHashFields), &alt
	}
	if r.QUIC != 0 {
		e.QUIC = abi.DirectorCounterNames[r.QUIC]
	}
	roles := []string{"primary", "secondary", "alt primary", "alt secondary"}
	for i, a := range r.Hops() {
		h := Hop{Role: roles[i], Addr: a.String(), Backend: -1}
		if j := slices.IndexFunc(t.Backends, func(b table.Backend) bool { return b.IP == a }); j >= 0 {
			b := t.Backends[j]
			h.Backend, h.State, h.Healthy, h.Weight = j, b.State.String(), b.Healthy, int(b.W())
		}
		h.ByCID = i == 0 && r.QUIC == model.QUICRouted
		e.Hops = append(e.Hops, h)
	}
}

// inputs are the flow's values the hash fields take, in the order the
// hash reads them.
func inputs(f model.Flow, fields table.HashFields) []string {
	var in []string
	if fields&table.HashSrcAddr != 0 {
		in = append(in, "src_addr "+f.Client.String())
	}
	if fields&table.HashSrcPort != 0 {
		in = append(in, fmt.Sprintf("src_port %d", f.ClientPort))
	}
	if fields&table.HashDstAddr != 0 {
		in = append(in, "dst_addr "+f.VIP.String())
	}
	if fields&table.HashDstPort != 0 {
		in = append(in, fmt.Sprintf("dst_port %d", f.VIPPort))
	}
	return in
}

// noBindWhy says why no bind matched a parsed flow: no bind covers its
// address, or those that do are for other protocols or ports.
func noBindWhy(tables []*table.Table, r model.Result) string {
	var near []string
	for i, t := range tables {
		for _, b := range t.Binds {
			if b.Prefix.Contains(r.VIP) {
				near = append(near, fmt.Sprintf("%s (%s)", b, table.DisplayName(t.Name, i)))
			}
		}
	}
	what := fmt.Sprintf("%s port %d", table.Proto(r.Proto), r.VIPPort)
	if len(near) == 0 {
		return fmt.Sprintf("no table binds %s", r.VIP)
	}
	return fmt.Sprintf("%s is bound for %s only, not %s", r.VIP, strings.Join(near, ", "), what)
}

func protoName(p uint8, echo bool) string {
	switch {
	case echo && p == 1:
		return "icmp echo"
	case echo:
		return "icmpv6 echo"
	case p == 6:
		return "tcp"
	case p == 17:
		return "udp"
	}
	return fmt.Sprintf("proto %d", p)
}

func verdictName(v int) string {
	switch v {
	case model.XDPPass:
		return "XDP_PASS"
	case model.XDPTX:
		return "XDP_TX"
	}
	return fmt.Sprintf("XDP action %d", v)
}

// passWhy says, for each counter a passed packet moves, what it means.
var passWhy = map[int]string{
	abi.CPassNotIP:        "not IPv4 or IPv6: the kernel's stack takes it (ARP, neighbour discovery, LLDP)",
	abi.CPassVLAN:         "QinQ, or more than one VLAN tag: the director reads one tag at most",
	abi.CPassMalformed:    "truncated or inconsistent headers: the kernel's stack judges it",
	abi.CPassFragment:     "an IP fragment: a fragment's flow cannot be known from it alone, so the kernel's stack takes it",
	abi.CPassIPv6Ext:      "more IPv6 extension headers than the director reads",
	abi.CPassProto:        "not TCP, UDP or an ICMP type the director steers: the kernel's stack takes it",
	abi.CPassICMPEchoOff:  "an ICMP echo request to a VIP, and forward_icmp_echo is off: the director host answers it",
	abi.CPassNoBind:       "no bind matches: not traffic for a VIP, so the kernel's stack takes it",
	abi.CPassHeadersSplit: "a multi-buffer frame whose headers run past its first buffer",
	abi.CPassTooBig:       "encapsulated, it would be over 65,535 bytes: no GUE packet can carry it",
	abi.CErrNoConfig:      "the director has no config applied: it steers nothing until one is",
	abi.CErrNoTable:       "its bind names a table slot that holds no table (an error: report it)",
}
