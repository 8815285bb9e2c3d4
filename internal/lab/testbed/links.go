// How hosts get their ports: veths, or real NICs taken from the home
// namespace and given back on Close.

package testbed

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/director/director/loader/testrun"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// takenNIC is a NIC a testbed host holds, and the name it had.
type takenNIC struct {
	host *Host
	name string // now
	orig string
	home netns.NsHandle
}

// takeNIC moves the next of the testbed's NICs into h's namespace as name,
// and returns it there. It is called in the namespace the NICs are in.
func (tb *Testbed) takeNIC(h *Host, name string) (netlink.Link, error) {
	if len(tb.nics) == 0 {
		return nil, errors.New("no NIC left for it")
	}
	orig := tb.nics[0]
	tb.nics = tb.nics[1:]
	var l netlink.Link
	err := testrun.Do(tb.home(), func() error {
		var err error
		if l, err = netlink.LinkByName(orig); err != nil {
			return err
		}
		netlink.LinkSetDown(l)
		return netlink.LinkSetNsFd(l, int(h.NS))
	})
	if err != nil {
		return nil, fmt.Errorf("taking NIC %s: %w", orig, err)
	}
	tb.taken = append(tb.taken, takenNIC{host: h, name: name, orig: orig, home: tb.home()})
	err = h.Do(func() error {
		var err error
		if l, err = netlink.LinkByName(orig); err != nil {
			return err
		}
		if err := netlink.LinkSetName(l, name); err != nil {
			return err
		}
		l, err = netlink.LinkByName(name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("taking NIC %s: %w", orig, err)
	}
	return l, nil
}

// home is the namespace the testbed was built from, where its NICs were.
func (tb *Testbed) home() netns.NsHandle { return tb.homeNS }

// giveBackNICs moves every NIC taken back home, under its own name, before
// the namespaces go: the kernel would move them back itself, but under
// whatever name was free.
func (tb *Testbed) giveBackNICs() error {
	var errs []error
	for _, t := range tb.taken {
		err := t.host.Do(func() error {
			l, err := netlink.LinkByName(t.name)
			if err != nil {
				return err
			}
			netlink.LinkSetDown(l)
			netlink.LinkSetXdpFd(l, -1) // none left after the unloads, but for a test's own
			if err := netlink.LinkSetName(l, t.orig); err != nil {
				return err
			}
			return netlink.LinkSetNsFd(l, int(t.home))
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("giving NIC %s back: %w", t.orig, err))
		}
	}
	tb.taken = nil
	if tb.homeNS.IsOpen() {
		tb.homeNS.Close()
	}
	return errors.Join(errs...)
}

// plugVeth makes h's eth0 a veth whose peer, port, is in the LAN's
// namespace, set up by lan.
func (tb *Testbed) plugVeth(h *Host, port string, lan func(netlink.Link) error) error {
	return tb.LAN.Do(func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port}, PeerName: "eth0"}
		if err := netlink.LinkAdd(v); err != nil {
			return err
		}
		peer, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetNsFd(peer, int(h.NS)); err != nil {
			return err
		}
		p, err := netlink.LinkByName(port)
		if err != nil {
			return err
		}
		sysctl("net.ipv4.conf."+port+".rp_filter", "0")
		sysctl("net.ipv4.conf."+port+".send_redirects", "0")
		if err := lan(p); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(p); err != nil {
			return err
		}
		pass, err := testrun.PassAll()
		if err != nil {
			return err
		}
		defer pass.Close()
		return netlink.LinkSetXdpFdWithFlags(p, pass.FD(), 4 /* XDP_FLAGS_DRV_MODE */)
	})
}

// addr6 gives l the IPv6 address ip/64 (a /128 for fd60::, the VIP),
// usable at once: no duplicate address detection among the testbed's
// own hosts.
func addr6(l netlink.Link, ip netip.Addr) error {
	bits := 64
	if ip == VIP6 {
		bits = 128
	}
	a, _ := netlink.ParseAddr(fmt.Sprintf("%s/%d", ip, bits))
	a.Flags = unix.IFA_F_NODAD
	return netlink.AddrAdd(l, a)
}
