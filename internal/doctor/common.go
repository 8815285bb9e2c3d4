package doctor

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/shellword"
	"github.com/director/director/loader"
)

// The checks both hosts run: the kernel, the attachments, and native veths.

// checkKernel finds what the programs use that the kernel lacks (the
// director's or the backend's own: the lab program's needs are the
// tests').
func checkKernel(ks *loader.KernelSupport, err error, program string) ([]Finding, string, error) {
	if err != nil {
		return nil, "", err
	}
	var fs []Finding
	for _, m := range ks.Missing {
		if strings.HasPrefix(m, program+": ") {
			fs = append(fs, Finding{
				What: fmt.Sprintf("kernel %s lacks %s, which the %s program uses: it does not load", ks.Release, strings.TrimPrefix(m, program+": "), program),
				Fix:  "boot a kernel director is tested on (Linux " + strings.Join(loader.TestedKernels, ", ") + ")",
			})
		}
	}
	detail := fmt.Sprintf("kernel %s has everything the %s program uses: %s build", ks.Release, program, ks.Build)
	if len(ks.Lacking) > 0 {
		detail += " (" + strings.Join(ks.Fallbacks, "; ") + ")"
	}
	return fs, detail, nil
}

// checkAttachments finds an interface steered in generic mode (a fallback:
// every packet is made an skb first), attachments whose interface is gone
// or in another namespace, and no attachment at all. cli is the program's
// commands ("director", "director backend"), its fixes run as printed.
func checkAttachments(atts []loader.Attachment, err error, cli string, keep ...string) ([]Finding, string, error) {
	if err != nil {
		return nil, "", err
	}
	attach := cli + " attach"
	var fs []Finding
	var here []string
	for _, a := range atts {
		switch {
		case a.State != "attached":
			detach := cli + " detach " + shellword.Join(a.Interface)
			fs = append(fs, Finding{What: fmt.Sprintf("the attachment to %s is %s: it steers nothing here", a.Interface, a.State),
				Fix: fmt.Sprintf("%s; then %s IFACE, the interface packets come in by", detach, attach), Run: []string{detach}})
		case a.Mode == loader.ModeGeneric:
			here = append(here, a.Interface+" generic")
			fs = append(fs, fixBy(fmt.Sprintf("%s runs the program in generic mode: every packet is made an skb first, several times the cost of native mode", a.Interface),
				" (a driver without native XDP refuses it, and says so)", attach+" "+shellword.Join(append([]string{a.Interface, "--mode", "native"}, keep...)...)))
		default:
			here = append(here, a.Interface+" "+a.Mode)
		}
	}
	if len(atts) == 0 {
		fs = append(fs, Finding{What: "the program is attached to no interface: it sees no packet", Fix: attach + " IFACE"})
	}
	return fs, "attached to " + strings.Join(here, ", "), nil
}

// checkVethPeers finds native attachments to a veth whose peer runs no XDP
// program.
func checkVethPeers(atts []loader.Attachment, err error, what string) ([]Finding, string, error) {
	if err != nil {
		return nil, "", err
	}
	var fs []Finding
	n := 0
	for _, a := range atts {
		if a.State != "attached" || a.Mode != loader.ModeNative {
			continue
		}
		if l, _ := netlink.LinkByName(a.Interface); l != nil && l.Type() == "veth" {
			n++
		}
		f, err := VethPeer(a.Interface, a.Mode, what)
		if err != nil {
			return nil, "", err
		}
		if f != nil {
			fs = append(fs, *f)
		}
	}
	if n == 0 {
		return skip("no native veth attached")
	}
	return fs, fmt.Sprintf("%d native veths, each peer running XDP", n), nil
}

// VethPeer finds iface a veth attached in mode native whose peer runs no
// XDP program: what the program transmits back out (what: XDP_TX) is
// dropped at the peer. 'attach' and 'backend attach' warn of the same.
func VethPeer(iface, mode, what string) (*Finding, error) {
	if mode != loader.ModeNative {
		return nil, nil
	}
	bad, err := loader.VethWithoutXDPPeer(iface)
	if err != nil || !bad {
		return nil, err
	}
	return &Finding{What: fmt.Sprintf("%s is a veth in native mode whose peer runs no XDP program: %s are dropped at the peer", iface, what),
		Fix: fmt.Sprintf("attach an XDP program to %s's peer (any, even one that passes everything), or attach %s in generic mode", iface, iface)}, nil
}

// hostAddrs are the addresses of this namespace's interfaces.
func hostAddrs() (map[netip.Addr]string, error) {
	addrs, err := netlink.AddrList(nil, unix.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	out := map[netip.Addr]string{}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		name := fmt.Sprint(a.LinkIndex)
		if ifi, err := net.InterfaceByIndex(a.LinkIndex); err == nil {
			name = ifi.Name
		}
		out[ip.Unmap()] = name
	}
	return out, nil
}
