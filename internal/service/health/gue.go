package health

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/pkt"
)

// pinger sends GUE probes and matches their echo replies: GLB's
// TunnelHealthChecker. A probe is a UDP datagram to the backend's GUE
// port holding GLB's GUE header and an IPv4 ICMP echo request from the
// director to the backend; the backend's decapsulating program hands the
// request to its stack, which answers the director directly. Replies are
// read from a raw ICMP socket (it needs CAP_NET_RAW) and matched by
// source, identifier and sequence number. A pinger is one family: for
// IPv6 backends the probe is GUE over IPv6 (docs/wire.md) holding an
// ICMPv6 echo request, and the replies come to a raw ICMPv6 socket.
type pinger struct {
	src  netip.Addr // the director's address: one family
	udp  *net.UDPConn
	icmp net.PacketConn
	id   uint16
	seq  atomic.Uint32

	mu      sync.Mutex
	waiting map[probeKey]chan struct{}
}

type probeKey struct {
	from netip.Addr
	seq  uint16
}

// The director's own reasons a GUE probe cannot be made: never the
// backend's fault (Result.Local).
var (
	ErrNoSource  = errors.New("no outbound_src_ip: GUE probes come from the director's address (pass --director-config)")
	ErrNoSource6 = errors.New("no outbound_src_ip6: GUE probes to IPv6 backends come from the director's IPv6 address (pass --director-config)")
	ErrNoRaw     = errors.New("needs CAP_NET_RAW: GUE probes' echo replies are read from a raw ICMP socket")
)

func newPinger(src netip.Addr) (*pinger, error) {
	if !src.IsValid() {
		return nil, ErrNoSource
	}
	network, raw, any := "udp4", "ip4:icmp", "0.0.0.0"
	if src.Is6() {
		network, raw, any = "udp6", "ip6:ipv6-icmp", "::"
	}
	udp, err := net.ListenUDP(network, nil)
	if err != nil {
		return nil, fmt.Errorf("GUE probes: %w", err)
	}
	icmp, err := net.ListenPacket(raw, any)
	if err != nil {
		udp.Close()
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			return nil, ErrNoRaw
		}
		return nil, fmt.Errorf("GUE probes: opening a raw ICMP socket: %w", err)
	}
	var b [2]byte
	rand.Read(b[:])
	g := &pinger{src: src, udp: udp, icmp: icmp, id: binary.BigEndian.Uint16(b[:]), waiting: map[probeKey]chan struct{}{}}
	go g.receive()
	return g, nil
}

func (g *pinger) close() error {
	g.udp.Close()
	return g.icmp.Close()
}

// receive delivers echo replies to their probes until the socket closes.
func (g *pinger) receive() {
	buf := make([]byte, 1500)
	for {
		n, from, err := g.icmp.ReadFrom(buf)
		if err != nil {
			return
		}
		m := buf[:n] // the ICMP message: the IP header is stripped
		reply := byte(icmpEchoReply)
		if g.src.Is6() {
			reply = icmp6EchoReply
		}
		if n < 8 || m[0] != reply || m[1] != 0 || binary.BigEndian.Uint16(m[4:]) != g.id {
			continue
		}
		ip := from.(*net.IPAddr).IP
		if g.src.Is4() {
			ip = ip.To4()
		}
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		k := probeKey{addr, binary.BigEndian.Uint16(m[6:])}
		g.mu.Lock()
		if ch, ok := g.waiting[k]; ok {
			close(ch)
			delete(g.waiting, k)
		}
		g.mu.Unlock()
	}
}

// ICMP's and ICMPv6's echo types.
const (
	icmpEchoRequest  = 8
	icmpEchoReply    = 0
	icmp6EchoRequest = 128
	icmp6EchoReply   = 129
)

// ping sends one probe to ip's GUE port and waits for its reply.
func (g *pinger) ping(ctx context.Context, ip netip.Addr, port int) error {
	if ip.Is4() != g.src.Is4() {
		return fmt.Errorf("GUE probes from %v go to backends of its family, not %v", g.src, ip)
	}
	seq := uint16(g.seq.Add(1))
	echo := uint32(g.id)<<16 | uint32(seq)
	body := []byte("director gue probe")
	h := gue.Header{Src: g.src, Hops: []netip.Addr{ip}, Proto: gue.ProtoIPv4}
	outer := 28 // the outer IPv4 and UDP headers, which the socket adds
	var inner []byte
	if ip.Is4() {
		inner = pkt.IPv4(g.src, ip, 1, pkt.ICMP(icmpEchoRequest, 0, echo, body), pkt.V4Opts{})
	} else {
		inner = pkt.IPv6(g.src, ip, 58, pkt.ICMPv6(g.src, ip, icmp6EchoRequest, 0, echo, body))
		h.Proto, outer = gue.ProtoIPv6, 48
	}
	msg := append(h.Append(nil, len(inner))[outer:], inner...)
	k := probeKey{ip, seq}
	ch := make(chan struct{})
	g.mu.Lock()
	g.waiting[k] = ch
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.waiting, k)
		g.mu.Unlock()
	}()
	if _, err := g.udp.WriteToUDPAddrPort(msg, netip.AddrPortFrom(ip, uint16(port))); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return errNoReply
	}
}
