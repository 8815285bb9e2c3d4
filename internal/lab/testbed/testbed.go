// Package testbed builds a small GLB network out of network namespaces on
// one machine: clients, one director (XDP, native, on its interface), a
// router, and backends running the backend program with the VIP on
// loopback and a real TCP server. Replies go straight from backends to
// clients (direct server return). Everything lives in namespaces the
// testbed created, on its own test addresses; Close removes it all, and a
// crashed run leaves nothing but pins, which New clears.
//
//	lan (bridge br0, 10.50.0.1, routes GUE to backends)
//	 ├─ client    10.50.0.2   route VIP via the director
//	 ├─ director  10.50.0.3   XDP director on eth0
//	 └─ backendN  10.50.0.1N  VIP 10.60.0.1 on lo, backend program on eth0, TCP :80
//
// Options.Underlay6 builds it with an IPv6 underlay: every host also has
// fd50::N (N as in 10.50.0.N), the backends serve VIP6 fd60::1 too, clients reach
// both VIPs through the director, and the director sends GUE over IPv6
// to the backends' IPv6 addresses (it has no IPv4 source at all). The
// backends keep their IPv4 addresses for one thing: their direct replies
// to IPv4 clients.
package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/table"
)

// Addresses of the testbed's own networks.
var (
	VIP       = netip.MustParseAddr("10.60.0.1")
	RouterIP  = netip.MustParseAddr("10.50.0.1")
	ClientIP  = netip.MustParseAddr("10.50.0.2")
	DirIP     = netip.MustParseAddr("10.50.0.3")
	pinPrefix = "director-testbed-"

	// The IPv6 underlay's (Options.Underlay6).
	VIP6      = netip.MustParseAddr("fd60::1")
	RouterIP6 = netip.MustParseAddr("fd50::1")
	DirIP6    = netip.MustParseAddr("fd50::3")

	// Trusted is what the backends trust GUE from and send it on to
	// ('backend attach --trust'): the LAN and the fleet's director links.
	Trusted = []netip.Prefix{netip.MustParsePrefix("10.50.0.0/24"), netip.MustParsePrefix("10.78.0.0/16"),
		netip.MustParsePrefix("fd50::/64"), netip.MustParsePrefix("fd78::/16")}
)

// TrustedList is Trusted as 'backend attach --trust' takes it.
func TrustedList() string {
	s := make([]string, len(Trusted))
	for i, p := range Trusted {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// ip6Of is the IPv6 address of the host at ip in the IPv6 underlay's LAN: fd50::N for
// 10.50.0.N.
func ip6Of(ip netip.Addr) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("fd50::%d", ip.As4()[3]))
}

// BackendIP6 is backend i's IPv6 address (i from 1), in a testbed with the IPv6 underlay.
func BackendIP6(i int) netip.Addr { return ip6Of(BackendIP(i)) }

// BackendIP is backend i's address (i from 1).
func BackendIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 50, 0, byte(10 + i)}) }

// Host is one namespace.
type Host struct {
	Name string
	NS   netns.NsHandle
	IP   netip.Addr
	IP6  netip.Addr // New6's only
	MAC  net.HardwareAddr
}

// Do runs f on a thread inside h's namespace. Sockets f creates stay in
// that namespace wherever they are used later.
func (h *Host) Do(f func() error) error { return testrun.Do(h.NS, f) }

// Testbed is the whole network.
type Testbed struct {
	LAN, Client, Director *Host
	Backends              []*Host
	BPFFS                 string // the director's pins
	GatewayMAC            net.HardwareAddr
	// Underlay6 is New6's: the director sends GUE over IPv6, to
	// BackendIP6 addresses.
	Underlay6 bool
	servers   []net.Listener
	health    map[int]*http.Server
	quic      map[int]*quicServer // ServeQUIC's, by backend
	conns     sync.WaitGroup
	// NewOnNICs's: the NICs not yet taken, and those taken (to give back).
	nics   []string
	taken  []takenNIC
	homeNS netns.NsHandle
}

// BackendBPFFS is backend i's pin directory.
func (tb *Testbed) BackendBPFFS(i int) string { return fmt.Sprintf("%s-be%d", tb.BPFFS, i) }

func newHost(name string, ip netip.Addr) (*Host, error) {
	ns, err := testrun.NewNetns()
	return &Host{Name: name, IP: ip, NS: ns}, err
}

func sysctl(path, value string) error {
	return os.WriteFile(filepath.Join("/proc/sys", strings.ReplaceAll(path, ".", "/")), []byte(value), 0o644)
}

// ClearStale removes pins left by a crashed run: those whose process
// (the number after the prefix) is gone. A live one's are its own: 'go
// test ./...' runs several packages' testbeds at once.
func ClearStale() {
	dirs, _ := filepath.Glob("/sys/fs/bpf/" + pinPrefix + "*")
	for _, d := range dirs {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), pinPrefix), "-")
		if _, err := os.Stat("/proc/" + pid); pid != "" && err == nil {
			continue
		}
		loader.Unload(d)
		os.RemoveAll(d)
	}
}

// Options say what New builds. The zero value but for Backends is the
// usual testbed: veths, an IPv4 underlay, pins of the process's own.
type Options struct {
	Backends int // backend1 to backendN
	// Underlay6 adds the IPv6 underlay (see the package doc).
	Underlay6 bool
	// NICs puts the hosts on real NICs rather than veths: on one Ethernet
	// segment of their own (testenv.NICs), they are the LAN's port (in
	// its bridge), then the client's, the director's and each backend's
	// eth0, so that the director and the backend programs run native in
	// the NICs' driver. It needs 3+Backends of them; Close gives them
	// back to the namespace they came from, under their names.
	NICs []string
	// Pins is where the director's pins go (the backends' beside them,
	// BackendBPFFS); "" for a directory of the process's own, which
	// ClearStale removes once the process is gone.
	Pins string
	// Deploy runs the director and backends as a deployment does
	// (Deploy): what 'make lab' leaves running, and what 'director
	// doctor' and 'backend doctor' find nothing wrong with.
	Deploy bool

	// fleet: no director of the testbed's own (the fleet adds them); the
	// client reaches the VIP through via.
	fleet bool
}

// New builds the network. The director is loaded, pinned and attached,
// but has no tables yet; the backends run their program and a TCP server
// on VIP:80 that answers each line with "NAME LINE".
func New(o Options) (*Testbed, error) {
	if o.NICs != nil && len(o.NICs) < 3+o.Backends {
		return nil, fmt.Errorf("a testbed of %d backends on NICs needs %d of them, not %d", o.Backends, 3+o.Backends, len(o.NICs))
	}
	tb, err := build(o)
	if err != nil {
		return nil, err
	}
	if err := tb.setupDirector(); err != nil {
		tb.Close()
		return nil, fmt.Errorf("director: %w", err)
	}
	if o.Deploy {
		if err := tb.Deploy(); err != nil {
			tb.Close()
			return nil, err
		}
	}
	return tb, nil
}

// build makes the LAN, the client, the director (unless o.fleet) and the
// backends; the client reaches the VIP through the director, or in a
// fleet through the router.
func build(o Options) (_ *Testbed, err error) {
	nics, n, underlay6, pins := o.NICs, o.Backends, o.Underlay6, o.Pins
	via := DirIP
	if o.fleet {
		via = RouterIP
	}
	ClearStale()
	if pins == "" {
		pins = fmt.Sprintf("/sys/fs/bpf/%s%d", pinPrefix, os.Getpid())
	}
	tb := &Testbed{BPFFS: pins, Underlay6: underlay6, nics: slices.Clone(nics)}
	if nics != nil {
		// This goroutine's thread is in the namespace the NICs are in:
		// testrun.Do never leaves one elsewhere.
		if tb.homeNS, err = netns.Get(); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			tb.Close()
		}
	}()
	if tb.LAN, err = newHost("lan", RouterIP); err != nil {
		return nil, err
	}
	if err := tb.LAN.Do(tb.setupLAN); err != nil {
		return nil, fmt.Errorf("lan: %w", err)
	}
	if tb.Client, err = tb.join("client", ClientIP); err != nil {
		return nil, err
	}
	if !o.fleet {
		if tb.Director, err = tb.join("director", DirIP); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= n; i++ {
		h, err := tb.join(fmt.Sprintf("backend%d", i), BackendIP(i))
		if err != nil {
			return nil, err
		}
		tb.Backends = append(tb.Backends, h)
	}
	if err := tb.Client.Do(func() error { return tb.routeClient(via) }); err != nil {
		return nil, fmt.Errorf("client route: %w", err)
	}
	for i, h := range tb.Backends {
		if err := tb.setupBackend(i+1, h); err != nil {
			return nil, fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	return tb, nil
}

// setupLAN makes the LAN, in its namespace: a bridge that also routes
// (the director's gateway).
func (tb *Testbed) setupLAN() error {
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := netlink.LinkAdd(br); err != nil {
		return err
	}
	// A fixed MAC: a bridge otherwise takes its ports' lowest, which
	// changes as hosts join, and the director sends to this one.
	mac, _ := net.ParseMAC("02:00:00:50:00:01")
	if err := netlink.LinkSetHardwareAddr(br, mac); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return err
	}
	a, _ := netlink.ParseAddr(RouterIP.String() + "/24")
	if err := netlink.AddrAdd(br, a); err != nil {
		return err
	}
	l, _ := netlink.LinkByName("br0")
	tb.GatewayMAC = l.Attrs().HardwareAddr
	if tb.nics != nil {
		// The segment reaches the bridge through the LAN's NIC.
		port, err := tb.takeNIC(tb.LAN, "lan0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMaster(port, br); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(port); err != nil {
			return err
		}
	}
	sysctl("net.ipv4.conf.all.send_redirects", "0")
	sysctl("net.ipv4.conf.br0.send_redirects", "0")
	if tb.Underlay6 {
		if err := addr6(br, RouterIP6); err != nil {
			return err
		}
		if err := sysctl("net.ipv6.conf.all.forwarding", "1"); err != nil {
			return err
		}
	}
	return sysctl("net.ipv4.ip_forward", "1")
}

// routeClient, in the client's namespace, routes the VIP through via.
// Clients reach the VIP through the director. Their packets are
// rewritten by XDP on the way, so they must leave with finished
// checksums, not offloaded ones.
func (tb *Testbed) routeClient(via netip.Addr) error {
	if err := testrun.DisableOffloads("eth0"); err != nil {
		return err
	}
	l, _ := netlink.LinkByName("eth0")
	_, dst, _ := net.ParseCIDR(VIP.String() + "/32")
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Gw: via.AsSlice()}); err != nil {
		return err
	}
	if !tb.Underlay6 {
		return nil
	}
	_, dst6, _ := net.ParseCIDR(VIP6.String() + "/128")
	return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst6, Gw: ip6Of(via).AsSlice()})
}

// join makes a host and plugs it into the LAN bridge.
func (tb *Testbed) join(name string, ip netip.Addr) (*Host, error) {
	h, err := newHost(name, ip)
	if err != nil {
		return nil, err
	}
	if tb.Underlay6 {
		h.IP6 = ip6Of(ip)
	}
	err = tb.plug(h, "p-"+name, ip, func(p netlink.Link) error {
		br, _ := netlink.LinkByName("br0")
		return netlink.LinkSetMaster(p, br)
	})
	if err != nil {
		h.NS.Close()
		return nil, err
	}
	return h, nil
}

// plug links host h's eth0 (address ip/24, up) to a port of the LAN
// namespace, which lan sets up (a bridge port, an address) before it is
// brought up. The port runs NAPI (a pass-all XDP program), so frames the
// host's XDP program transmits back are accepted.
func (tb *Testbed) plug(h *Host, port string, ip netip.Addr, lan func(netlink.Link) error) error {
	var err error
	if tb.nics != nil {
		// A NIC of the segment, whose LAN end is the LAN's own NIC.
		_, err = tb.takeNIC(h, "eth0")
	} else {
		err = tb.plugVeth(h, port, lan)
	}
	if err != nil {
		return fmt.Errorf("%s: plugging in: %w", h.Name, err)
	}
	err = h.Do(func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		a, _ := netlink.ParseAddr(ip.String() + "/24")
		if err := netlink.AddrAdd(l, a); err != nil {
			return err
		}
		if h.IP6.IsValid() {
			if err := addr6(l, h.IP6); err != nil {
				return err
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		h.MAC = l.Attrs().HardwareAddr
		sysctl("net.ipv4.conf.all.rp_filter", "0")
		return sysctl("net.ipv4.conf.eth0.rp_filter", "0")
	})
	if err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	return nil
}

func (tb *Testbed) setupBackend(i int, h *Host) error {
	return h.Do(func() error {
		lo, _ := netlink.LinkByName("lo")
		a, _ := netlink.ParseAddr(VIP.String() + "/32")
		if err := netlink.AddrAdd(lo, a); err != nil {
			return err
		}
		if tb.Underlay6 {
			if err := addr6(lo, VIP6); err != nil {
				return err
			}
			// Second chance over IPv6 is a fib lookup too.
			if err := sysctl("net.ipv6.conf.all.forwarding", "1"); err != nil {
				return err
			}
		}
		// Second chance sends packets on with a fib lookup, which needs
		// forwarding on. The other backends' MACs are found as a real
		// network finds them: the first packet to one goes through the
		// kernel, which resolves its neighbour.
		if err := sysctl("net.ipv4.conf.eth0.forwarding", "1"); err != nil {
			return err
		}
		b, err := loader.LoadBackend(tb.BackendBPFFS(i))
		if err != nil {
			return err
		}
		defer b.Close()
		// As 'backend attach' does: GUE is taken for the host's addresses,
		// the VIPs on lo among them.
		if _, _, err := b.Setup(loader.BackendSetup{Iface: "eth0", Mode: loader.ModeNative, Self: h.IP, SecondChance: true, Trust: Trusted}); err != nil {
			return err
		}
		vips := []string{"tcp4", VIP.String() + ":80"}
		if tb.Underlay6 {
			vips = append(vips, "tcp6", "["+VIP6.String()+"]:80")
		}
		for k := 0; k < len(vips); k += 2 {
			ln, err := net.Listen(vips[k], vips[k+1])
			if err != nil {
				return err
			}
			tb.servers = append(tb.servers, ln)
			go tb.serve(h.Name, ln)
		}
		return nil
	})
}

// selves are the addresses h's backend program forwards from.
func (h *Host) selves() []netip.Addr {
	if h.IP6.IsValid() {
		return []netip.Addr{h.IP, h.IP6}
	}
	return []netip.Addr{h.IP}
}

// serve answers every line with the backend's name and the line.
func (tb *Testbed) serve(name string, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		tb.conns.Add(1)
		go func() {
			defer tb.conns.Done()
			defer c.Close()
			echo(name, c)
		}()
	}
}

// echo answers every line read from rw with name and the line, until
// rw fails; an HTTP request (curl, a browser) it answers with its name,
// in HTTP.
func echo(name string, rw io.ReadWriter) {
	r := bufio.NewReader(rw)
	for first := true; ; first = false {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if first && (strings.HasPrefix(line, "GET ") || strings.HasPrefix(line, "HEAD ")) {
			body := name + "\n"
			fmt.Fprintf(rw, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
			return
		}
		if _, err := fmt.Fprintf(rw, "%s %s", name, line); err != nil {
			return
		}
	}
}

func (tb *Testbed) setupDirector() error {
	return tb.Director.Do(func() error {
		d, err := loader.Load(tb.BPFFS)
		if err != nil {
			return err
		}
		defer d.Close()
		dc := tb.DirectorConfig()
		if _, _, err := d.Commit(&loader.Proposal{Config: &dc}, nil); err != nil {
			return err
		}
		_, err = d.Attach("eth0", loader.ModeNative)
		return err
	})
}

// DirectorConfig is the director config the testbed's director runs
// with.
func (tb *Testbed) DirectorConfig() table.DirectorConfig {
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = DirIP
	if tb.Underlay6 {
		// No IPv4 source: nothing can go over IPv4 to a backend.
		dc.SrcIP, dc.SrcIP6 = netip.Addr{}, DirIP6
	}
	// One client address: hash its ports too, so connections spread.
	dc.HashFields = table.HashSrcAddr | table.HashSrcPort
	dc.GatewayMAC = tb.GatewayMAC
	return dc
}

// Director opens the pinned director (the control plane's view).
func (tb *Testbed) OpenDirector() (*loader.Director, error) { return loader.Open(tb.BPFFS) }

// Dial connects from the client to the VIP.
func (tb *Testbed) Dial() (net.Conn, error) { return tb.DialFrom(netip.Addr{}) }

// DialFrom connects from the client's address src (any when not valid)
// to the VIP.
func (tb *Testbed) DialFrom(src netip.Addr) (net.Conn, error) { return tb.DialTo(src, VIP) }

// DialTo connects from the client's address src (any when not valid) to
// vip, VIP or New6's VIP6.
func (tb *Testbed) DialTo(src, vip netip.Addr) (net.Conn, error) {
	var c net.Conn
	err := tb.Client.Do(func() error {
		d := net.Dialer{Timeout: 3 * time.Second}
		if src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		var err error
		c, err = d.Dial("tcp", netip.AddrPortFrom(vip, 80).String())
		return err
	})
	return c, err
}

// vipFor is the VIP connection id goes to: VIP, or with the IPv6 underlay
// VIP and VIP6 in turn, so that every test sends both families' clients.
func (tb *Testbed) vipFor(id int) netip.Addr {
	if tb.Underlay6 && id%2 == 1 {
		return VIP6
	}
	return VIP
}

// Close tears everything down: servers, pins, namespaces (and with them
// every interface).
func (tb *Testbed) Close() error {
	var errs []error
	for _, ln := range tb.servers {
		ln.Close()
	}
	for _, srv := range tb.health {
		srv.Close()
	}
	for i := range tb.quic {
		tb.StopQUIC(i)
	}
	if tb.BPFFS != "" {
		errs = append(errs, loader.Unload(tb.BPFFS))
		for i := range tb.Backends {
			errs = append(errs, loader.Unload(tb.BackendBPFFS(i+1)))
		}
	}
	errs = append(errs, tb.giveBackNICs())
	for _, h := range append([]*Host{tb.LAN, tb.Client, tb.Director}, tb.Backends...) {
		if h != nil {
			h.NS.Close()
		}
	}
	return errors.Join(errs...)
}
