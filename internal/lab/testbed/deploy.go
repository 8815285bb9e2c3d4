package testbed

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/loader"
)

// LabMTU is the underlay MTU of a deployed testbed (Deploy): room for a
// client's 1,500-byte packet and the encapsulation with its longest chain,
// over IPv6 (eight hops, seven listed: 168 bytes).
const LabMTU = 1700

// Deploy finishes the testbed as a deployment is finished: an underlay
// whose MTU carries a client's full-size packet encapsulated (LabMTU on the
// LAN; the client keeps 1,500, as a client on the Internet would), the
// director's default route through the router, and the router's route for
// the VIPs through the director (as ECMP or BGP would give it).
func (tb *Testbed) Deploy() error {
	err := tb.LAN.Do(func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		// The ports first: a bridge's MTU follows its ports'.
		for _, l := range links {
			if name := l.Attrs().Name; strings.HasPrefix(name, "p-") && name != "p-client" {
				if err := netlink.LinkSetMTU(l, LabMTU); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
		}
		for _, r := range tb.vipRoutes() {
			if err := netlink.RouteAdd(r); err != nil {
				return fmt.Errorf("route to %s: %w", r.Dst, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("lan: %w", err)
	}
	for _, h := range append([]*Host{tb.Director}, tb.Backends...) {
		err := h.Do(func() error {
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			return netlink.LinkSetMTU(l, LabMTU)
		})
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	return tb.Director.Do(func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		gws := []net.IP{RouterIP.AsSlice()}
		if tb.Underlay6 {
			gws = append(gws, RouterIP6.AsSlice())
		}
		for _, gw := range gws {
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw}); err != nil {
				return fmt.Errorf("default route via %s: %w", gw, err)
			}
		}
		// The datapath reads the interface's MTU from a map on kernels
		// without bpf_check_mtu.
		d, err := loader.Open(tb.BPFFS)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.SyncLinkMTUs()
	})
}

// vipRoutes are the router's routes for the VIPs, through the director.
func (tb *Testbed) vipRoutes() []*netlink.Route {
	br, _ := netlink.LinkByName("br0")
	idx := 0
	if br != nil {
		idx = br.Attrs().Index
	}
	rs := []*netlink.Route{{LinkIndex: idx, Dst: hostNet(VIP.AsSlice()), Gw: DirIP.AsSlice()}}
	if tb.Underlay6 {
		rs = append(rs, &netlink.Route{LinkIndex: idx, Dst: hostNet(VIP6.AsSlice()), Gw: DirIP6.AsSlice()})
	}
	return rs
}

// RouteVIPs adds (on) or removes the router's routes for the VIPs.
func (tb *Testbed) RouteVIPs(on bool) error {
	return tb.LAN.Do(func() error {
		for _, r := range tb.vipRoutes() {
			op := netlink.RouteAdd
			if !on {
				op = netlink.RouteDel
			}
			if err := op(r); err != nil {
				return err
			}
		}
		return nil
	})
}

func hostNet(ip net.IP) *net.IPNet {
	bits := 8 * len(ip)
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}
}

// Hosts are the testbed's hosts: the LAN, the client, the director and
// the backends.
func (tb *Testbed) Hosts() []*Host {
	return append([]*Host{tb.LAN, tb.Client, tb.Director}, tb.Backends...)
}

// NameNamespaces gives each host's namespace a name, PREFIX-HOST, as 'ip
// netns add' would (a bind mount under /run/netns): others can enter them
// (nsenter --net=/run/netns/PREFIX-director), and they outlive this
// process until UnnameNamespaces. It returns the paths it made, also when
// it fails part way, so that its caller removes those and no others.
func (tb *Testbed) NameNamespaces(prefix string) ([]string, error) {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return nil, err
	}
	var made []string
	for _, h := range tb.Hosts() {
		path := filepath.Join(NetnsDir, prefix+"-"+h.Name)
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
		if err != nil {
			return made, err
		}
		f.Close()
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", int(h.NS)), path, "none", unix.MS_BIND, ""); err != nil {
			os.Remove(path)
			return made, fmt.Errorf("naming %s's namespace %s: %w", h.Name, path, err)
		}
		made = append(made, path)
	}
	return made, nil
}

// NetnsDir is where named network namespaces are bound ('ip netns').
const NetnsDir = "/run/netns"

// UnnameNamespaces removes the names NameNamespaces made (paths), and
// says which it removed: only those, never another name under the same
// prefix ('ip netns add lab-mine' is someone else's).
func UnnameNamespaces(paths []string) ([]string, error) {
	var errs []error
	var removed []string
	for _, p := range paths {
		if filepath.Dir(p) != NetnsDir {
			errs = append(errs, fmt.Errorf("%s: not a name under %s, left alone", p, NetnsDir))
			continue
		}
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}
