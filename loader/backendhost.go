package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
)

// BackendHost is the host a pinned backend program runs on, as the program
// sees it: its settings and accepted addresses read from its maps, and the
// kernel's answers to what it asks (the TCP socket lookup, the route and
// neighbour of a next hop) found through netlink as the kernel finds them.
// 'backend explain' runs the backend program's model against it.
type BackendHost struct {
	Config  model.BackendConfig
	Ingress *net.Interface // the interface packets come in by
	// Accepts are the prefixes of be_accept and be_accept6.
	Accepts []netip.Prefix
	// Err is the first error a lookup met (netlink refused, a sysctl
	// unreadable): the answer it gave is then a guess, and explain says so.
	Err error
}

// Host reads what the program holds, for packets coming in by iface.
func (b *BackendProgram) Host(iface string) (*BackendHost, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", iface, err)
	}
	h := &BackendHost{Ingress: ifi}
	var c abi.BeConfig
	if err := b.maps.BeCfg.Lookup(uint32(0), &c); err != nil {
		return nil, fmt.Errorf("reading the backend's settings: %w", err)
	}
	h.Config = model.BackendConfig{Configured: c.Configured != 0, SecondChance: c.NoSecondChance == 0, TrustListed: c.TrustListed != 0}
	if c.SelfIp != 0 {
		h.Config.Self4 = addrFromNative(c.SelfIp)
	}
	if a := netip.AddrFrom16(c.SelfIp6); !a.IsUnspecified() {
		h.Config.Self6 = a
	}
	if h.Accepts, err = b.accept().read(); err != nil {
		return nil, fmt.Errorf("reading the backend's accepted prefixes: %w", err)
	}
	if h.Config.Trust, err = b.trust().read(); err != nil {
		return nil, fmt.Errorf("reading whom the backend trusts: %w", err)
	}
	return h, nil
}

// Accepted is the program's be_accept lookup.
func (h *BackendHost) Accepted(a netip.Addr) bool { return model.InPrefixes(h.Accepts, a) }

func (h *BackendHost) fail(err error) {
	if h.Err == nil {
		h.Err = err
	}
}

// Socket is bpf_skc_lookup_tcp's answer, asked of sock_diag: the kernel
// looks the flow up exactly as the program's helper does (established,
// then listening sockets), so a listener alone is told apart.
func (h *BackendHost) Socket(client, vip netip.AddrPort) (found, listening bool) {
	state, err := sockDiag(unix.IPPROTO_TCP, vip, client, false)
	if errors.Is(err, unix.ENOENT) {
		// sock_diag says ENOENT both for no such socket and for no TCP
		// handler (tcp_diag not loaded, and not loadable): a dump, which
		// finds the handler or fails, tells them apart.
		if _, derr := sockDiag(unix.IPPROTO_TCP, vip, client, true); derr != nil && !errors.Is(derr, errNoAnswer) {
			h.fail(fmt.Errorf("socket lookup: the kernel's sock_diag has no TCP handler (modprobe tcp_diag): %w", derr))
		}
		return false, false
	}
	if err != nil {
		h.fail(fmt.Errorf("socket lookup: %w", err))
		return false, false
	}
	return true, state == tcpListen
}

// errNoAnswer is a sock_diag request answered with no socket: for a dump
// of no states, what a kernel with the handler says.
var errNoAnswer = errors.New("sock_diag gave no answer")

const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	tcpListen        = 10 // TCP_LISTEN
)

// sockDiag asks sock_diag for the one socket of protocol proto between
// local and remote (inet_diag's exact lookup) and returns its state;
// ENOENT when there is none. With probe, it asks for a dump of no states
// instead, which a kernel with the protocol's handler answers with
// nothing (errNoAnswer).
func sockDiag(proto uint8, local, remote netip.AddrPort, probe bool) (uint8, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Sec: 2}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, err
	}
	// struct nlmsghdr, then struct inet_diag_req_v2 (56 bytes).
	msg := make([]byte, 16+56)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], sockDiagByFamily)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	req := msg[16:]
	req[0] = unix.AF_INET
	if local.Addr().Is6() && !local.Addr().Is4In6() {
		req[0] = unix.AF_INET6
	}
	req[1] = proto
	binary.NativeEndian.PutUint32(req[4:], 0xffffffff) // every state
	if probe {
		binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
		binary.NativeEndian.PutUint32(req[4:], 0)
	}
	id := req[8:] // struct inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	if req[0] == unix.AF_INET {
		l, r := local.Addr().As4(), remote.Addr().As4()
		copy(id[4:], l[:])
		copy(id[20:], r[:])
	} else {
		l, r := local.Addr().As16(), remote.Addr().As16()
		copy(id[4:], l[:])
		copy(id[20:], r[:])
	}
	binary.NativeEndian.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	binary.NativeEndian.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, err
	}
	msgs, err := syscallParseNetlink(buf[:n])
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		switch m.typ {
		case unix.NLMSG_ERROR:
			if len(m.data) >= 4 {
				if e := int32(binary.NativeEndian.Uint32(m.data)); e != 0 {
					return 0, unix.Errno(-e)
				}
			}
		case unix.NLMSG_DONE:
			// A dump's end; its error, when it failed, is here.
			if len(m.data) >= 4 {
				if e := int32(binary.NativeEndian.Uint32(m.data)); e < 0 {
					return 0, unix.Errno(-e)
				}
			}
		case sockDiagByFamily:
			if len(m.data) >= 2 {
				return m.data[1], nil // struct inet_diag_msg: family, state, ...
			}
		}
	}
	return 0, errNoAnswer
}

type nlMsg struct {
	typ  uint16
	data []byte
}

func syscallParseNetlink(b []byte) ([]nlMsg, error) {
	var out []nlMsg
	for len(b) >= 16 {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		if l < 16 || l > len(b) {
			return nil, fmt.Errorf("netlink message of %d bytes in %d", l, len(b))
		}
		out = append(out, nlMsg{typ: binary.NativeEndian.Uint16(b[4:]), data: b[16:l]})
		b = b[min((l+3)&^3, len(b)):]
	}
	return out, nil
}

// Route is the program's route(): bpf_fib_lookup as output from the
// interface the packet came in by (its neighbour resolved: sent back out
// of it; unresolved: left to the kernel), else as the kernel forwards
// (through the kernel), else nowhere. The kernel refuses both lookups
// when forwarding is off on that interface. The routing tables are read
// as the kernel's default rules read them (local, main, default).
func (h *BackendHost) Route(self, dst netip.Addr) model.NextHopRoute {
	family, sysctl := unix.AF_INET, "/proc/sys/net/ipv4/conf/"+h.Ingress.Name+"/forwarding"
	if !dst.Is4() {
		family, sysctl = unix.AF_INET6, "/proc/sys/net/ipv6/conf/"+h.Ingress.Name+"/forwarding"
	}
	if on, err := os.ReadFile(sysctl); err != nil {
		h.fail(err)
	} else if strings.TrimSpace(string(on)) == "0" {
		key := strings.ReplaceAll(strings.TrimPrefix(sysctl, "/proc/sys/"), "/", ".")
		return model.NextHopRoute{How: model.RouteNone, ForwardingOff: true,
			Why: fmt.Sprintf("forwarding is off on %s, so the kernel's route lookup refuses every next hop (sysctl -w %s=1)", h.Ingress.Name, key)}
	}
	routes, err := dumped(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		h.fail(fmt.Errorf("listing routes: %w", err))
		return model.NextHopRoute{How: model.RouteNone, Why: err.Error()}
	}
	if r, ok := fibLookup(routes, dst, h.Ingress.Index); ok && r.Type == unix.RTN_UNICAST {
		nh := dst
		if gw, ok := netip.AddrFromSlice(r.Gw); ok && r.Gw != nil {
			nh = gw.Unmap()
		}
		if state, ok := h.neighbour(h.Ingress.Index, nh); ok {
			return model.NextHopRoute{How: model.RouteTX, Why: fmt.Sprintf("out %s to %s, its neighbour resolved (%s)", h.Ingress.Name, via(nh, dst), state)}
		}
		return model.NextHopRoute{How: model.RouteStack, Why: fmt.Sprintf("out %s to %s, whose neighbour entry is not resolved: the kernel resolves it, holding the packet", h.Ingress.Name, via(nh, dst))}
	}
	r, ok := fibLookup(routes, dst, 0)
	switch {
	case ok && r.Type == unix.RTN_UNICAST:
		name := fmt.Sprint(r.LinkIndex)
		if l, err := net.InterfaceByIndex(r.LinkIndex); err == nil {
			name = l.Name
		}
		return model.NextHopRoute{How: model.RouteStack, Why: fmt.Sprintf("routed out %s, not %s: the kernel forwards it", name, h.Ingress.Name)}
	case ok && r.Type == unix.RTN_LOCAL:
		return model.NextHopRoute{How: model.RouteNone, Why: fmt.Sprintf("%s is this host's own address", dst)}
	case ok:
		return model.NextHopRoute{How: model.RouteNone, Why: fmt.Sprintf("the route to %s is %s", dst, routeType(r.Type))}
	}
	return model.NextHopRoute{How: model.RouteNone, Why: fmt.Sprintf("no route to %s", dst)}
}

func via(nh, dst netip.Addr) string {
	if nh == dst {
		return dst.String()
	}
	return fmt.Sprintf("%s via %s", dst, nh)
}

func routeType(t int) string {
	switch t {
	case unix.RTN_BLACKHOLE:
		return "a blackhole"
	case unix.RTN_UNREACHABLE:
		return "unreachable"
	case unix.RTN_PROHIBIT:
		return "prohibited"
	}
	return fmt.Sprintf("of type %d", t)
}

// fibLookup is the kernel's FIB lookup under the default rules: the local
// table, then main, then default; in each the longest prefix holding dst,
// the lowest metric first; a route whose next hops are all out of another
// interface than oif (when oif is not 0) is passed over, as the kernel
// passes it over for an output lookup bound to oif. A reject route (a
// blackhole...) ends the lookup; a throw route goes on to the next table.
func fibLookup(routes []netlink.Route, dst netip.Addr, oif int) (netlink.Route, bool) {
	for _, table := range []int{unix.RT_TABLE_LOCAL, unix.RT_TABLE_MAIN, unix.RT_TABLE_DEFAULT} {
		var cands []netlink.Route
		for _, r := range routes {
			if r.Table != table || !contains(r.Dst, dst) {
				continue
			}
			cands = append(cands, r)
		}
		slices.SortStableFunc(cands, func(a, b netlink.Route) int {
			if d := bits(b.Dst) - bits(a.Dst); d != 0 {
				return d
			}
			return a.Priority - b.Priority
		})
		for _, r := range cands {
			switch r.Type {
			case unix.RTN_THROW:
				goto nextTable
			case unix.RTN_BLACKHOLE, unix.RTN_UNREACHABLE, unix.RTN_PROHIBIT:
				return r, true
			}
			if oif == 0 || r.LinkIndex == oif || slices.ContainsFunc(r.MultiPath, func(p *netlink.NexthopInfo) bool { return p.LinkIndex == oif }) {
				return r, true
			}
		}
	nextTable:
	}
	return netlink.Route{}, false
}

func contains(n *net.IPNet, a netip.Addr) bool {
	if n == nil {
		return true // the default route
	}
	p, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return false
	}
	ones, _ := n.Mask.Size()
	pfx := netip.PrefixFrom(p.Unmap(), ones)
	if !a.Is4() {
		pfx = netip.PrefixFrom(p, ones)
	}
	return pfx.Contains(a)
}

func bits(n *net.IPNet) int {
	if n == nil {
		return 0
	}
	ones, _ := n.Mask.Size()
	return ones
}

// neighbour is the state of a's neighbour entry on link, when it is one
// the kernel sends to (NUD_VALID: reachable, stale, delay, probe, noarp,
// permanent).
func (h *BackendHost) neighbour(link int, a netip.Addr) (string, bool) {
	family := unix.AF_INET
	if !a.Is4() {
		family = unix.AF_INET6
	}
	ns, err := netlink.NeighList(link, family)
	if err != nil {
		h.fail(fmt.Errorf("listing neighbours: %w", err))
		return "", false
	}
	const valid = unix.NUD_PERMANENT | unix.NUD_NOARP | unix.NUD_REACHABLE | unix.NUD_PROBE | unix.NUD_STALE | unix.NUD_DELAY
	for _, n := range ns {
		if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a && n.State&valid != 0 {
			return fmt.Sprintf("%s, %s", n.HardwareAddr, NeighbourState(n.State)), true
		}
	}
	return "", false
}

// NeighbourState names a neighbour entry's state (NUD_*), the strongest
// bit first.
func NeighbourState(s int) string {
	for _, n := range []struct {
		bit  int
		name string
	}{{unix.NUD_PERMANENT, "permanent"}, {unix.NUD_NOARP, "noarp"}, {unix.NUD_REACHABLE, "reachable"},
		{unix.NUD_PROBE, "probe"}, {unix.NUD_STALE, "stale"}, {unix.NUD_DELAY, "delay"}} {
		if s&n.bit != 0 {
			return n.name
		}
	}
	return fmt.Sprintf("state %#x", s)
}
