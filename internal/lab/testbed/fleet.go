package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/loader"
)

// A fleet is the testbed with several directors behind a router, as GLB
// runs them: the LAN namespace also runs BIRD 2, which learns the VIP from
// every director over BGP and installs one ECMP route with a next hop per
// director, hashing flows on their 5-tuple. Each director has its own
// link to the router (10.78.N.0/24), so a director whose link fails is
// noticed at once, as a router port going down would be.
//
//	client 10.50.0.2, 10.50.0.100-... ──┐
//	backends 10.50.0.11-...  ───────────┤ br0 10.50.0.1  router (BIRD, AS 65000)
//	                                    ├─ d1 10.78.1.1 ── director1 10.78.1.2 (AS 65001)
//	                                    ├─ d2 10.78.2.1 ── director2 10.78.2.2
//	                                    └─ ...
//
// NewFleet6 adds the IPv6 underlay (New6): each director link also has
// fd78:N::1 and fd78:N::2, each director a second BGP session over IPv6
// announcing VIP6, BIRD an IPv6 ECMP route to it, and the directors send
// GUE over IPv6 to the backends' fd50:: addresses from their fd78:N::2.
type Fleet struct {
	*Testbed
	Directors map[int]*Host // by number, from 1
	Clients   []netip.Addr  // the client's source addresses
	Clients6  []netip.Addr  // and its IPv6 ones, with NewFleet6 (ip6Of each)
	dir       string
	bird      *exec.Cmd
	birdLog   *lockedBuffer
	birdDone  chan struct{}
}

// BGP numbers of the fleet.
const (
	RouterASN   = 65000
	DirectorASN = 65001
)

// DirectorLink is the addresses of director i's link: the router's end
// and the director's.
func DirectorLink(i int) (router, director netip.Addr) {
	return netip.AddrFrom4([4]byte{10, 78, byte(i), 1}), netip.AddrFrom4([4]byte{10, 78, byte(i), 2})
}

// DirectorLink6 is DirectorLink's IPv6 addresses, with NewFleet6.
func DirectorLink6(i int) (router, director netip.Addr) {
	return netip.MustParseAddr(fmt.Sprintf("fd78:%d::1", i)), netip.MustParseAddr(fmt.Sprintf("fd78:%d::2", i))
}

// DirectorBPFFS is director i's pin directory.
func (f *Fleet) DirectorBPFFS(i int) string { return fmt.Sprintf("%s-d%d", f.BPFFS, i) }

// DirectorConfig is the path of director i's director.conf.
func (f *Fleet) DirectorConfig(i int) string {
	return filepath.Join(f.dir, fmt.Sprintf("director%d.conf", i))
}

// NewFleet builds the network with n backends, a client with clients
// source addresses, and a router that will peer with directors 1 to
// maxDirectors (AddDirector adds them). dir holds BIRD's files and the
// directors' configs.
func NewFleet(n, maxDirectors, clients int, dir string) (_ *Fleet, err error) {
	return newFleetBed(n, maxDirectors, clients, dir, false)
}

// NewFleet6 is NewFleet with the IPv6 underlay.
func NewFleet6(n, maxDirectors, clients int, dir string) (_ *Fleet, err error) {
	return newFleetBed(n, maxDirectors, clients, dir, true)
}

func newFleetBed(n, maxDirectors, clients int, dir string, underlay6 bool) (_ *Fleet, err error) {
	tb, err := build(Options{Backends: n, Underlay6: underlay6, fleet: true})
	if err != nil {
		return nil, err
	}
	f := &Fleet{Testbed: tb, Directors: map[int]*Host{}, dir: dir}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	err = f.LAN.Do(func() error {
		// Hash real sockets' packets on addresses, protocol and ports:
		// policy 1 would use the socket's random hash over veth.
		set := map[string]string{"net.ipv4.fib_multipath_hash_policy": "3", "net.ipv4.fib_multipath_hash_fields": "0x0037",
			"net.ipv4.conf.all.ignore_routes_with_linkdown": "1", "net.ipv4.conf.default.ignore_routes_with_linkdown": "1",
			"net.ipv4.conf.all.rp_filter": "0", "net.ipv4.conf.default.rp_filter": "0", "net.ipv4.conf.default.send_redirects": "0"}
		if underlay6 {
			for k, v := range map[string]string{"net.ipv6.fib_multipath_hash_policy": "3", "net.ipv6.fib_multipath_hash_fields": "0x0037",
				"net.ipv6.conf.all.ignore_routes_with_linkdown": "1", "net.ipv6.conf.default.ignore_routes_with_linkdown": "1"} {
				set[k] = v
			}
		}
		for k, v := range set {
			if err := sysctl(k, v); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	f.Clients = append(f.Clients, ClientIP)
	if underlay6 {
		f.Clients6 = append(f.Clients6, f.Client.IP6)
	}
	err = f.Client.Do(func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		for k := 1; k < clients; k++ {
			a := netip.AddrFrom4([4]byte{10, 50, 0, byte(99 + k)})
			na, _ := netlink.ParseAddr(a.String() + "/24")
			if err := netlink.AddrAdd(l, na); err != nil {
				return err
			}
			f.Clients = append(f.Clients, a)
			if underlay6 {
				if err := addr6(l, ip6Of(a)); err != nil {
					return err
				}
				f.Clients6 = append(f.Clients6, ip6Of(a))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("client addresses: %w", err)
	}
	if err := f.startBIRD(maxDirectors, underlay6); err != nil {
		return nil, fmt.Errorf("bird: %w", err)
	}
	return f, nil
}

// birdConfig peers with directors 1 to n: short timers, quick retries
// after a failure (BIRD's default error wait is 60 s), and the directors'
// routes merged into one multipath kernel route.
// With the IPv6 underlay, the same again over IPv6: a session per director
// for VIP6, into an IPv6 multipath route.
func birdConfig(n int, underlay6 bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `router id %s;
log stderr all;
protocol device { scan time 1; }
protocol kernel { ipv4 { import none; export all; }; merge paths yes; }
template bgp director {
	local as %d;
	hold time 3; keepalive time 1; connect retry time 1; error wait time 1, 5;
	ipv4 { import all; export none; };
}
`, RouterIP, RouterASN)
	if underlay6 {
		fmt.Fprintf(&b, `protocol kernel { ipv6 { import none; export all; }; merge paths yes; }
template bgp director6 {
	local as %d;
	hold time 3; keepalive time 1; connect retry time 1; error wait time 1, 5;
	ipv6 { import all; export none; };
}
`, RouterASN)
	}
	for i := 1; i <= n; i++ {
		_, d := DirectorLink(i)
		fmt.Fprintf(&b, "protocol bgp d%d from director { neighbor %s as %d; }\n", i, d, DirectorASN)
		if underlay6 {
			_, d6 := DirectorLink6(i)
			fmt.Fprintf(&b, "protocol bgp d%d6 from director6 { neighbor %s as %d; }\n", i, d6, DirectorASN)
		}
	}
	return b.String()
}

func (f *Fleet) startBIRD(n int, underlay6 bool) error {
	bird, err := exec.LookPath("bird")
	if err != nil {
		return fmt.Errorf("BIRD 2 is not installed (Debian: apt-get install bird2): %w", err)
	}
	conf := filepath.Join(f.dir, "bird.conf")
	if err := os.WriteFile(conf, []byte(birdConfig(n, underlay6)), 0o644); err != nil {
		return err
	}
	f.birdLog = &lockedBuffer{}
	f.bird = exec.Command(bird, "-f", "-c", conf, "-s", filepath.Join(f.dir, "bird.ctl"))
	f.bird.Stdout, f.bird.Stderr = f.birdLog, f.birdLog
	if err := f.LAN.Start(f.bird); err != nil {
		return err
	}
	f.birdDone = make(chan struct{})
	go func() { f.bird.Wait(); close(f.birdDone) }()
	select {
	case <-f.birdDone:
		return fmt.Errorf("bird exited: %s", f.birdLog.String())
	case <-time.After(200 * time.Millisecond):
	}
	return nil
}

// BIRDLog is what BIRD has logged.
func (f *Fleet) BIRDLog() string { return f.birdLog.String() }

// AddDirector makes director i's namespace and its link to the router, and
// writes its director.conf (its own source address and gateway, and a BGP
// session to the router). The test then starts 'director run' in it.
func (f *Fleet) AddDirector(i int) (*Host, error) {
	r, d := DirectorLink(i)
	h, err := newHost(fmt.Sprintf("director%d", i), d)
	if err != nil {
		return nil, err
	}
	r6, d6 := DirectorLink6(i)
	if f.Underlay6 {
		h.IP6 = d6
	}
	var gw net.HardwareAddr
	err = f.plug(h, fmt.Sprintf("d%d", i), d, func(p netlink.Link) error {
		gw = p.Attrs().HardwareAddr
		a, _ := netlink.ParseAddr(r.String() + "/24")
		if err := netlink.AddrAdd(p, a); err != nil {
			return err
		}
		if f.Underlay6 {
			return addr6(p, r6)
		}
		return nil
	})
	if err == nil {
		err = h.Do(func() error {
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: r.AsSlice()}); err != nil {
				return err
			}
			if f.Underlay6 {
				return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: r6.AsSlice()})
			}
			return nil
		})
	}
	if err != nil {
		h.NS.Close()
		return nil, fmt.Errorf("director%d: %w", i, err)
	}
	// GUE from the director's own address on its link, through the
	// router (its port's MAC); with the IPv6 underlay over IPv6 only.
	src, peers := fmt.Sprintf(`"outbound_src_ip": "%s"`, d), fmt.Sprintf(`{"address": "%s", "asn": %d}`, r, RouterASN)
	if f.Underlay6 {
		src = fmt.Sprintf(`"outbound_src_ip6": "%s"`, d6)
		peers += fmt.Sprintf(`, {"address": "%s", "asn": %d}`, r6, RouterASN)
	}
	conf := fmt.Sprintf(`{%s, "outbound_gateway_mac": "%s", "hash_fields": {"src_addr": true, "src_port": true},
  "bgp": {"asn": %d, "router_id": "%s", "peers": [%s], "hold_time_s": 3, "drain_s": 1, "connect_retry_s": 1}}`,
		src, gw, DirectorASN, d, peers)
	if err := os.WriteFile(f.DirectorConfig(i), []byte(conf), 0o600); err != nil {
		h.NS.Close()
		return nil, err
	}
	f.Directors[i] = h
	return h, nil
}

// SetDirectorLink sets director i's link up or down, from the router's
// side: the director host failing, as the router sees it.
func (f *Fleet) SetDirectorLink(i int, up bool) error {
	return f.LAN.Do(func() error {
		l, err := netlink.LinkByName(fmt.Sprintf("d%d", i))
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return netlink.LinkSetDown(l)
	})
}

// Nexthops lists the directors the router's route to the VIP goes to,
// by number, in order.
func (f *Fleet) Nexthops() ([]int, error) { return f.NexthopsTo(VIP) }

// NexthopsTo is Nexthops for the route to vip, VIP or VIP6.
func (f *Fleet) NexthopsTo(vip netip.Addr) ([]int, error) {
	var out []int
	err := f.LAN.Do(func() error {
		fam, bits := netlink.FAMILY_V4, 32
		if vip.Is6() {
			fam, bits = netlink.FAMILY_V6, 128
		}
		routes, err := netlink.RouteListFiltered(fam, &netlink.Route{Dst: &net.IPNet{IP: vip.AsSlice(), Mask: net.CIDRMask(bits, bits)}},
			netlink.RT_FILTER_DST)
		if err != nil {
			return err
		}
		add := func(gw net.IP) {
			if a, ok := netip.AddrFromSlice(gw.To4()); ok {
				out = append(out, int(a.As4()[2]))
			} else if a, ok := netip.AddrFromSlice(gw); ok && a.Is6() {
				out = append(out, int(a.As16()[3])) // fd78:N::2
			}
		}
		for _, r := range routes {
			if r.Gw != nil {
				add(r.Gw)
			}
			for _, nh := range r.MultiPath {
				if nh.Flags&(unix.RTNH_F_DEAD|unix.RTNH_F_LINKDOWN) == 0 {
					add(nh.Gw)
				}
			}
		}
		return nil
	})
	sort.Ints(out)
	return out, err
}

// Close stops BIRD, unloads every director and tears the rest down.
func (f *Fleet) Close() error {
	var errs []error
	if f.bird != nil && f.bird.Process != nil {
		f.bird.Process.Kill()
		<-f.birdDone
	}
	for i, h := range f.Directors {
		errs = append(errs, loader.Unload(f.DirectorBPFFS(i)))
		h.NS.Close()
	}
	errs = append(errs, f.Testbed.Close())
	return errors.Join(errs...)
}

// lockedBuffer collects a process's output from its copying goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
