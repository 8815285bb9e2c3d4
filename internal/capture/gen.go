package capture

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net/netip"
	"sort"
	"time"

	"github.com/director/director/internal/pkt"
	"github.com/director/director/table"
)

// GenOptions shape a synthetic capture.
type GenOptions struct {
	Flows int    // client flows to VIPs (default 1000)
	Seed  uint64 // same seed, same capture
}

// GenStats counts what was generated.
type GenStats struct {
	// Flows is TCPFlows + UDPFlows + EchoFlows; ICMPErrors and Noise are
	// packets.
	Packets, Flows, TCPFlows, UDPFlows, EchoFlows, ICMPErrors, Noise int
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
// teardown); UDP flows; ICMP fragmentation-needed and packet-too-big
// messages quoting real flows; ICMP echo requests to VIPs; and noise that no
// bind matches (other addresses, ARP). emit receives the packets in time
// order.
func Generate(c *table.Config, o GenOptions, emit func(time.Time, []byte) error) (GenStats, error) {
	if o.Flows <= 0 {
		o.Flows = 1000
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	var binds []table.Bind
	for _, t := range c.Tables {
		binds = append(binds, t.Binds...)
	}
	var st GenStats
	var out []timed
	span := time.Duration(o.Flows) * time.Millisecond // about a thousand new flows a second
	add := func(t time.Duration, ip []byte) {
		out = append(out, timed{t, pkt.Frame(ip)})
	}
	for i := 0; i < o.Flows; i++ {
		b := binds[rng.IntN(len(binds))]
		vip := addrIn(rng, b.Prefix)
		v6 := vip.Is6()
		client := clientAddr(rng, v6)
		cport := uint16(1024 + rng.IntN(64512))
		vport := b.PortStart + uint16(rng.IntN(int(b.PortEnd-b.PortStart)+1))
		t := time.Duration(rng.Int64N(int64(span)))
		ip := func(proto uint8, l4 []byte) []byte {
			if v6 {
				return pkt.IPv6(client, vip, proto, l4)
			}
			return pkt.IPv4(client, vip, proto, l4, pkt.V4Opts{ID: uint16(rng.Uint32())})
		}
		step := func() time.Duration { return time.Duration(1+rng.IntN(20)) * time.Millisecond }
		n := heavyTail(rng)
		st.Flows++
		if rng.IntN(100) == 0 { // echo requests to the VIP
			st.EchoFlows++
			typ := uint8(8)
			proto := uint8(1)
			if v6 {
				typ, proto = 128, 58
			}
			for k := 0; k < 1+rng.IntN(4); k++ {
				add(t, ip(proto, pkt.ICMP(typ, 0, uint32(i)<<16|uint32(k), make([]byte, 56))))
				t += time.Second
			}
			continue
		}
		if b.Proto == table.ProtoUDP {
			st.UDPFlows++
			for k := 0; k < n; k++ {
				add(t, ip(17, pkt.UDP(cport, vport, make([]byte, 20+rng.IntN(500)))))
				t += step()
			}
			continue
		}
		st.TCPFlows++
		add(t, ip(6, pkt.TCP(cport, vport, 0x02, nil))) // SYN
		t += step()
		add(t, ip(6, pkt.TCP(cport, vport, 0x10, nil))) // ACK
		for k := 0; k < n; k++ {
			t += step()
			add(t, ip(6, pkt.TCP(cport, vport, 0x18, make([]byte, 100+rng.IntN(1300)))))
		}
		if rng.IntN(50) == 0 { // the path to the client has a smaller MTU
			t += step()
			reply := pkt.TCP(vport, cport, 0x18, make([]byte, 1400))
			if v6 {
				quoted := pkt.IPv6(vip, client, 6, reply)
				add(t, pkt.IPv6(netip.MustParseAddr("2001:db8:ffff::1"), vip, 58, pkt.ICMP(2, 0, 1280, quoted[:1232])))
			} else {
				quoted := pkt.IPv4(vip, client, 6, reply, pkt.V4Opts{FragOff: 0x4000})
				add(t, pkt.IPv4(netip.MustParseAddr("198.51.100.254"), vip, 1, pkt.ICMP(3, 4, 1300, quoted[:28]), pkt.V4Opts{}))
			}
			st.ICMPErrors++
		}
		t += step()
		add(t, ip(6, pkt.TCP(cport, vport, 0x11, nil))) // FIN
		t += step()
		add(t, ip(6, pkt.TCP(cport, vport, 0x10, nil))) // ACK
	}
	// Noise: traffic to addresses no bind covers, and ARP.
	noise := len(out) / 20
	for i := 0; i < noise; i++ {
		t := time.Duration(rng.Int64N(int64(span)))
		if i%10 == 0 {
			arp := make([]byte, 28)
			binary.BigEndian.PutUint16(arp, 1)
			out = append(out, timed{t, pkt.Eth([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, pkt.ClientMAC, 0, 0x0806, arp)})
		} else {
			dst := netip.AddrFrom4([4]byte{192, 0, 2, byte(rng.IntN(256))})
			add(t, pkt.IPv4(clientAddr(rng, false), dst, 6, pkt.TCP(uint16(1024+rng.IntN(60000)), 22, 0x02, nil), pkt.V4Opts{}))
		}
		st.Noise++
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].t < out[j].t })
	for _, p := range out {
		if err := emit(Epoch.Add(p.t), p.frame); err != nil {
			return st, err
		}
	}
	st.Packets = len(out)
	return st, nil
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
