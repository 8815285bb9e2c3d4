package pcapfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/table"
	"github.com/director/director/table/quiclb/cidcipher"
)

// MaxGenFlows is the most flows Generate makes: the capture is built in
// memory (about 2 KB a flow), then sorted.
const MaxGenFlows = 1_000_000

// GenOptions shape a synthetic capture.
type GenOptions struct {
	Flows int    // client flows to VIPs, 1 to MaxGenFlows
	Seed  uint64 // same seed, same capture
}

// GenStats counts what was generated.
type GenStats struct {
	// Flows is TCPFlows + UDPFlows + QUICFlows + EchoFlows; ICMPErrors and
	// Noise are packets.
	Packets, Flows, TCPFlows, UDPFlows, QUICFlows, EchoFlows, ICMPErrors, Noise int
}

// Epoch is the first timestamp of generated captures: fixed, so that the
// same seed gives the same file.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type timed struct {
	t     time.Duration
	frame []byte
}

// Generate makes deterministic traffic to the config's binds: many IPv4 and
// IPv6 clients; TCP connections (handshake, data with heavy-tailed sizes,
// teardown); UDP flows, QUIC connections to the UDP binds of tables with
// QUIC-LB routing (quic); ICMP fragmentation-needed and packet-too-big
// messages quoting real flows; ICMP echo requests to VIPs; and noise that no
// bind matches (other addresses, ARP). emit receives the packets in time
// order.
func Generate(c *table.Config, o GenOptions, emit func(time.Time, []byte) error) (GenStats, error) {
	if o.Flows < 1 || o.Flows > MaxGenFlows {
		return GenStats{}, fmt.Errorf("%d flows: from 1 to %d", o.Flows, MaxGenFlows)
	}
	g := &generator{
		rng:  rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)),
		span: time.Duration(o.Flows) * time.Millisecond, // about a thousand new flows a second
	}
	var binds []table.Bind
	var of []*table.TableConfig // each bind's table
	for i := range c.Tables {
		for _, b := range c.Tables[i].Binds {
			binds, of = append(binds, b), append(of, &c.Tables[i])
		}
	}
	if len(binds) == 0 {
		return GenStats{}, errors.New("the config has no binds to send traffic to")
	}
	for i := 0; i < o.Flows; i++ {
		k := g.rng.IntN(len(binds))
		g.flow(i, binds[k], of[k])
	}
	g.noise(len(g.out) / 20)
	sort.SliceStable(g.out, func(i, j int) bool { return g.out[i].t < g.out[j].t })
	for _, p := range g.out {
		if err := emit(Epoch.Add(p.t), p.frame); err != nil {
			return g.st, err
		}
	}
	g.st.Packets = len(g.out)
	return g.st, nil
}

// generator holds one capture's random source, its packets so far and its
// counts. Every draw goes through rng in a fixed order: the same seed gives
// the same file.
type generator struct {
	rng  *rand.Rand
	span time.Duration
	out  []timed
	st   GenStats
}

// genFlow is one client flow being written: its addresses, ports and clock.
type genFlow struct {
	g            *generator
	client, vip  netip.Addr
	cport, vport uint16
	t            time.Duration
}

func (g *generator) add(t time.Duration, ip []byte) {
	g.out = append(g.out, timed{t, pkt.Frame(ip)})
}

// flow writes the i-th client flow to b, a bind of t: mostly TCP or UDP by
// the bind's protocol (QUIC where t has QUIC-LB routing), one in a
// hundred an echo exchange.
func (g *generator) flow(i int, b table.Bind, t *table.TableConfig) {
	rng := g.rng
	vip := addrIn(rng, b.Prefix)
	f := &genFlow{g: g, vip: vip, client: clientAddr(rng, vip.Is6())}
	f.cport = uint16(1024 + rng.IntN(64512))
	f.vport = b.PortStart + uint16(rng.IntN(int(b.PortEnd-b.PortStart)+1))
	f.t = time.Duration(rng.Int64N(int64(g.span)))
	n := heavyTail(rng)
	g.st.Flows++
	switch {
	case rng.IntN(100) == 0:
		g.st.EchoFlows++
		f.echo(i)
	case b.Proto == table.ProtoUDP && t.QUIC.On():
		g.st.QUICFlows++
		f.quic(n, t)
	case b.Proto == table.ProtoUDP:
		g.st.UDPFlows++
		f.udp(n)
	default:
		g.st.TCPFlows++
		f.tcp(n)
	}
}

// ip wraps l4 from the client to the VIP.
func (f *genFlow) ip(proto uint8, l4 []byte) []byte {
	if f.vip.Is6() {
		return pkt.IPv6(f.client, f.vip, proto, l4)
	}
	return pkt.IPv4(f.client, f.vip, proto, l4, pkt.V4Opts{ID: uint16(f.g.rng.Uint32())})
}

// send adds l4 at the flow's clock and then advances the clock by a step.
func (f *genFlow) send(proto uint8, l4 []byte) {
	f.g.add(f.t, f.ip(proto, l4))
	f.t += f.step()
}

func (f *genFlow) step() time.Duration {
	return time.Duration(1+f.g.rng.IntN(20)) * time.Millisecond
}

// echo writes one to four echo requests a second apart.
func (f *genFlow) echo(i int) {
	typ, proto := uint8(8), uint8(1)
	if f.vip.Is6() {
		typ, proto = 128, 58
	}
	for k := 0; k < 1+f.g.rng.IntN(4); k++ {
		f.g.add(f.t, f.ip(proto, pkt.ICMP(typ, 0, uint32(i)<<16|uint32(k), make([]byte, 56))))
		f.t += time.Second
	}
}

func (f *genFlow) udp(n int) {
	for k := 0; k < n; k++ {
		f.send(17, pkt.UDP(f.cport, f.vport, make([]byte, 20+f.g.rng.IntN(500))))
	}
}

// quic writes a QUIC connection to a table with QUIC-LB routing: the
// client's Initial (a long header with a destination ID of the client's
// own choosing, padded to 1,200 bytes), then n short-header packets to the
// ID a backend's server issued (any backend of the table, serving or
// not). One connection in four moves to a new client port halfway, as
// after a NAT rebinding.
func (f *genFlow) quic(n int, t *table.TableConfig) {
	rng := f.g.rng
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	initial := append([]byte{0xc3, 0, 0, 0, 1, 8}, random(8)...)
	initial = append(append(initial, 8), random(8)...)
	f.send(17, pkt.UDP(f.cport, f.vport, append(initial, make([]byte, 1200-len(initial))...)))
	// An ID of one of the table's configs (all of them, while one
	// rotates), as its server issued it.
	cs := t.QUIC.Configs()
	ci := 0
	if len(cs) > 1 { // a table of one config draws as it always did
		ci = rng.IntN(len(cs))
	}
	q := cs[ci]
	cid := append([]byte{q.ConfigID<<5 | byte(q.CIDLen()-1)}, t.Backends[rng.IntN(len(t.Backends))].ServerIDIn(ci)...)
	cid = append(cid, random(int(q.NonceLen))...)
	if q.Encrypted { // as the servers issue them
		if c, err := cidcipher.New(q.Key, int(q.ServerIDLen), int(q.NonceLen)); err == nil {
			c.Encrypt(cid[1:], slices.Clone(cid[1:]))
		}
	}
	rebind := rng.IntN(4) == 0
	for k := 0; k < n; k++ {
		if rebind && k == n/2 {
			f.cport = uint16(1024 + rng.IntN(64512))
		}
		payload := append([]byte{0x40 | byte(rng.IntN(64))}, cid...)
		f.send(17, pkt.UDP(f.cport, f.vport, append(payload, make([]byte, 20+rng.IntN(500))...)))
	}
}

// tcp writes a connection: handshake, n data segments, sometimes an ICMP
// error quoting the flow, teardown.
func (f *genFlow) tcp(n int) {
	rng := f.g.rng
	f.send(6, pkt.TCP(f.cport, f.vport, 0x02, nil))             // SYN
	f.g.add(f.t, f.ip(6, pkt.TCP(f.cport, f.vport, 0x10, nil))) // ACK
	for k := 0; k < n; k++ {
		f.t += f.step()
		f.g.add(f.t, f.ip(6, pkt.TCP(f.cport, f.vport, 0x18, make([]byte, 100+rng.IntN(1300)))))
	}
	if rng.IntN(50) == 0 { // the path to the client has a smaller MTU
		f.t += f.step()
		f.tooBig()
	}
	f.t += f.step()
	f.send(6, pkt.TCP(f.cport, f.vport, 0x11, nil))             // FIN
	f.g.add(f.t, f.ip(6, pkt.TCP(f.cport, f.vport, 0x10, nil))) // ACK
}

// tooBig writes the router's ICMP error for a reply on the flow that did not
// fit: fragmentation needed (IPv4) or packet too big (IPv6).
func (f *genFlow) tooBig() {
	reply := pkt.TCP(f.vport, f.cport, 0x18, make([]byte, 1400))
	if f.vip.Is6() {
		quoted := pkt.IPv6(f.vip, f.client, 6, reply)
		f.g.add(f.t, pkt.IPv6(netip.MustParseAddr("2001:db8:ffff::1"), f.vip, 58, pkt.ICMP(2, 0, 1280, quoted[:1232])))
	} else {
		quoted := pkt.IPv4(f.vip, f.client, 6, reply, pkt.V4Opts{FragOff: 0x4000})
		f.g.add(f.t, pkt.IPv4(netip.MustParseAddr("198.51.100.254"), f.vip, 1, pkt.ICMP(3, 4, 1300, quoted[:28]), pkt.V4Opts{}))
	}
	f.g.st.ICMPErrors++
}

// noise adds n packets no bind matches: ARP broadcasts and TCP to
// addresses outside every VIP.
func (g *generator) noise(n int) {
	rng := g.rng
	for i := 0; i < n; i++ {
		t := time.Duration(rng.Int64N(int64(g.span)))
		if i%10 == 0 {
			arp := make([]byte, 28)
			binary.BigEndian.PutUint16(arp, 1)
			g.out = append(g.out, timed{t, pkt.Eth([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, pkt.ClientMAC, 0, 0x0806, arp)})
		} else {
			dst := netip.AddrFrom4([4]byte{192, 0, 2, byte(rng.IntN(256))})
			g.add(t, pkt.IPv4(clientAddr(rng, false), dst, 6, pkt.TCP(uint16(1024+rng.IntN(60000)), 22, 0x02, nil), pkt.V4Opts{}))
		}
		g.st.Noise++
	}
}

// heavyTail draws a flow length: most flows are short, a few are long
// (Pareto, shape 1.2, capped).
func heavyTail(rng *rand.Rand) int {
	u := 1 - rng.Float64()
	n := int(math.Pow(u, -1/1.2))
	return min(n, 500)
}

// addrIn picks an address inside a prefix.
func addrIn(rng *rand.Rand, p netip.Prefix) netip.Addr {
	p = p.Masked()
	b := p.Addr().AsSlice()
	for bit := p.Bits(); bit < len(b)*8; bit++ {
		if rng.IntN(2) == 1 {
			b[bit/8] |= 0x80 >> (bit % 8)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// clientAddr is a client in the benchmarking ranges (198.18.0.0/15,
// 2001:db8::/32): addresses that are never anybody's real hosts.
func clientAddr(rng *rand.Rand, v6 bool) netip.Addr {
	if v6 {
		var a [16]byte
		a[0], a[1], a[2], a[3] = 0x20, 0x01, 0x0d, 0xb8
		for i := 4; i < 16; i++ {
			a[i] = byte(rng.Uint32())
		}
		return netip.AddrFrom16(a)
	}
	return netip.AddrFrom4([4]byte{198, byte(18 + rng.IntN(2)), byte(rng.Uint32()), byte(rng.Uint32())})
}
