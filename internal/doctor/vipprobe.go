// The VIP check: probes sent out through the network that must come back
// in on an attached interface when the network routes the VIP here.

package doctor

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/director/director/internal/service/status"
	"github.com/director/director/internal/shellword"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"golang.org/x/sys/unix"
)

// probes is how many datagrams are sent to each VIP, each from its own
// port: behind ECMP among several directors, some reach this one.
const probes = 16

// probeTTL bounds a probe's life: enough for a few routers between this
// host and the one that routes the VIP back.
const probeTTL = 16

// checkVIPsRouted sends probes to each VIP through the network (this
// host's route to it) and watches the attached interfaces for them coming
// back in: they do when the network routes the VIP to this director.
// The probes are UDP to a port no bind of the VIP covers, so that the
// datapath passes them to the stack (pass_no_bind), which drops them.
func checkVIPsRouted(tables []*table.Table, atts []loader.Attachment, st *status.Status, wait time.Duration) ([]Finding, string, error) {
	var ifaces []string
	for _, a := range atts {
		if a.State == "attached" {
			ifaces = append(ifaces, a.Interface)
		}
	}
	if len(ifaces) == 0 {
		return skip("no interface attached")
	}
	addrs, err := hostAddrs()
	if err != nil {
		return nil, "", err
	}
	var fs []Finding
	var ok []string
	for _, vip := range vips(tables) {
		if _, local := addrs[vip]; local {
			fs = append(fs, fixBy(fmt.Sprintf("VIP %s is an address of this host: what the datapath passes of it is answered here", vip), "",
				shellword.Join("ip", "addr", "del", fmt.Sprintf("%s/%d", vip, vip.BitLen()), "dev", addrs[vip])))
			continue
		}
		port, free := freePort(tables, vip)
		if !free {
			ok = append(ok, vip.String()+" (not probed: UDP binds cover every port)")
			continue
		}
		back, err := probeVIP(vip, port, ifaces, wait)
		if err != nil {
			return nil, "", fmt.Errorf("probing %s: %w", vip, err)
		}
		if back != "" {
			ok = append(ok, fmt.Sprintf("%s (a probe came back in by %s)", vip, back))
			continue
		}
		f := Finding{What: fmt.Sprintf("VIP %s: none of %d probes sent to it through the network came back to this director: the network does not route it here", vip, probes),
			Fix: fmt.Sprintf("route %s to this director on the router ('ip route add %s via <this host>'), or announce it over BGP (director.conf's bgp block, director run)", vip, vip)}
		if st != nil && st.BGP != nil {
			f.What += "; BGP: " + bgpSummary(st.BGP, vip)
			f.Fix = "check the BGP session with the router and its import policy ('director status' shows the sessions)"
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 && len(ok) == 0 {
		return skip("no VIP")
	}
	return fs, "routed here: " + strings.Join(ok, ", "), nil
}

func bgpSummary(b *status.BGP, vip netip.Addr) string {
	announced := slices.ContainsFunc(b.Announced, func(p netip.Prefix) bool { return p.Contains(vip) })
	var peers []string
	for _, p := range b.Peers {
		peers = append(peers, fmt.Sprintf("%s %s", p.Address, p.State))
	}
	if announced {
		return "announced to " + strings.Join(peers, ", ")
	}
	return "not announced (peers " + strings.Join(peers, ", ") + ")"
}

// vips are the addresses the tables bind (a prefix's first).
func vips(tables []*table.Table) []netip.Addr {
	var out []netip.Addr
	for _, t := range tables {
		for _, b := range t.Binds {
			a := b.Prefix.Masked().Addr()
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// freePort is a UDP port of vip no bind covers, from the traceroute range
// up.
func freePort(tables []*table.Table, vip netip.Addr) (uint16, bool) {
	for p := 33434; p < 65536; p++ {
		bound := false
		for _, t := range tables {
			for _, b := range t.Binds {
				if b.Matches(vip, table.ProtoUDP, uint16(p)) {
					bound = true
				}
			}
		}
		if !bound {
			return uint16(p), true
		}
	}
	return 0, false
}

// probeVIP sends probes UDP datagrams to vip:port, each from a port of its
// own, carrying a random token, and returns the interface (of ifaces) one
// came back in by within wait, or "".
func probeVIP(vip netip.Addr, port uint16, ifaces []string, wait time.Duration) (string, error) {
	token := make([]byte, 16)
	rand.Read(token)
	token = append([]byte("director-doctor "), []byte(hex.EncodeToString(token))...)
	type sock struct {
		fd   int
		name string
	}
	var socks []sock
	defer func() {
		for _, s := range socks {
			unix.Close(s.fd)
		}
	}()
	for _, name := range ifaces {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return "", err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return "", err
		}
		socks = append(socks, sock{fd, name})
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			return "", err
		}
	}
	for i := 0; i < probes; i++ {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip, port)))
		if err != nil {
			return "", fmt.Errorf("this host has no route to send a probe by: %w", err)
		}
		// A short life: a host that forwards what the datapath passes
		// would send the probe back to the router, and round again.
		if raw, err := c.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				if vip.Is4() {
					unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, probeTTL)
				} else {
					unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, probeTTL)
				}
			})
		}
		_, err = c.Write(token)
		c.Close()
		if err != nil {
			return "", err
		}
	}
	buf := make([]byte, 2048)
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		for _, s := range socks {
			for {
				n, from, err := unix.Recvfrom(s.fd, buf, 0)
				if err != nil {
					break
				}
				if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
					continue
				}
				if isProbe(buf[:n], vip, port, token) {
					return s.name, nil
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "", nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// isProbe says whether frame is a probe: UDP to vip:port carrying token.
// (An ICMP error quoting one is not: a router that cannot route the VIP
// sends one back.)
func isProbe(frame []byte, vip netip.Addr, port uint16, token []byte) bool {
	if len(frame) < 14 {
		return false
	}
	ip := frame[14:]
	var dst netip.Addr
	var udp []byte
	switch {
	case vip.Is4() && len(ip) >= 20 && ip[0]>>4 == 4 && ip[9] == unix.IPPROTO_UDP:
		dst, udp = netip.AddrFrom4([4]byte(ip[16:20])), ip[min(int(ip[0]&0xf)*4, len(ip)):]
	case vip.Is6() && len(ip) >= 40 && ip[0]>>4 == 6 && ip[6] == unix.IPPROTO_UDP:
		dst, udp = netip.AddrFrom16([16]byte(ip[24:40])), ip[40:]
	default:
		return false
	}
	return dst == vip && len(udp) >= 8 && binary.BigEndian.Uint16(udp[2:]) == port && bytes.Equal(udp[8:], token)
}
