package doctor

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/service/status"
	"github.com/director/director/internal/shellword"
	"github.com/director/director/loader"
	"github.com/director/director/table"
)

// DirectorOptions says what to check on a director host.
type DirectorOptions struct {
	BPFFS string
	// CLI is how the fixes spell a director command: "director" and the
	// --bpffs this doctor was given, so that a fix runs as printed
	// ("director" when ""). DirectorConfig is the director config it was
	// given, if any, which a fix that plans names too.
	CLI, DirectorConfig string
	// Kernel probes the kernel (loader.ProbeKernel when nil).
	Kernel func() (*loader.KernelSupport, error)
	// ClientMTU is the largest packet a client sends (1500 when 0).
	ClientMTU int
	// Planned plans the forwarding table config against what is live, as
	// 'director plan' does, and returns the changes it would make (none:
	// the live tables are the config's). Nil: not checked. Config names
	// the config, for messages.
	Planned func(d *loader.Director) ([]string, error)
	Config  string
	// LockDir is where 'director run' publishes its status
	// (status.DefaultLockDir when "").
	LockDir string
	// ProbeWait is how long a VIP probe is waited for (1s when 0).
	ProbeWait time.Duration
}

// Director checks a director host.
func Director(o DirectorOptions) *Report {
	if o.CLI == "" {
		o.CLI = "director"
	}
	if o.Kernel == nil {
		o.Kernel = loader.ProbeKernel
	}
	if o.ClientMTU == 0 {
		o.ClientMTU = 1500
	}
	if o.LockDir == "" {
		o.LockDir = status.DefaultLockDir
	}
	if o.ProbeWait == 0 {
		o.ProbeWait = time.Second
	}
	r := &Report{Host: "director"}
	r.run("kernel", func() ([]Finding, string, error) {
		ks, err := o.Kernel()
		return checkKernel(ks, err, "director")
	})
	d, err := loader.Open(o.BPFFS)
	r.run("loaded", func() ([]Finding, string, error) {
		if errors.Is(err, loader.ErrNotLoaded) {
			return []Finding{{What: fmt.Sprintf("no director is loaded at %s", o.BPFFS), Fix: o.CLI + " load", Run: []string{o.CLI + " load"}}}, "", nil
		}
		if err != nil {
			return nil, "", err
		}
		return nil, "loaded at " + o.BPFFS, nil
	})
	if err != nil {
		return r
	}
	defer d.Close()
	live, lerr := d.LiveState()
	r.run("config-applied", func() ([]Finding, string, error) {
		if lerr != nil {
			return nil, "", lerr
		}
		if live.Config == nil {
			return []Finding{{What: "no director config is applied: the director steers nothing",
				// Not &&: a plan that changes something exits 2.
				Fix: o.CLI + " plan CONFIG --director-config director.conf -o plan.json, then " + o.CLI + " apply plan.json"}}, "", nil
		}
		return nil, fmt.Sprintf("%d tables live", len(live.Tables)), nil
	})
	atts, aerr := d.Attachments()
	r.run("attach-mode", func() ([]Finding, string, error) { return checkAttachments(atts, aerr, o.CLI) })
	r.run("veth-peer", func() ([]Finding, string, error) {
		return checkVethPeers(atts, aerr, "the GUE packets the director sends")
	})
	if lerr != nil || live.Config == nil {
		return r
	}
	dc := live.Config
	r.run("mtu", func() ([]Finding, string, error) { return checkMTU(dc, live.Tables, atts, o.ClientMTU) })
	r.run("source-address", func() ([]Finding, string, error) { return checkSources(dc) })
	r.run("gateway", func() ([]Finding, string, error) { return checkGateway(dc, atts, false) })
	r.run("gateway6", func() ([]Finding, string, error) { return checkGateway(dc, atts, true) })
	st, serr := status.Read(o.LockDir, o.BPFFS)
	r.run("vip-routed", func() ([]Finding, string, error) { return checkVIPsRouted(live.Tables, atts, st, o.ProbeWait) })
	r.run("live-tables", func() ([]Finding, string, error) {
		if o.Planned == nil {
			return skip("no forwarding table config given (--config), and no director run names one")
		}
		changes, err := o.Planned(d)
		if err != nil {
			return nil, "", err
		}
		if len(changes) > 0 {
			plan, apply := planApply(o.CLI, o.DirectorConfig, o.Config)
			return []Finding{{What: fmt.Sprintf("the live tables are not %s's: %s", o.Config, strings.Join(changes, "; ")),
				Fix: fmt.Sprintf("%s, review it, %s (director run applies it by itself when safe)", plan, apply), Run: []string{plan, apply}}}, "", nil
		}
		return nil, "the live tables are " + o.Config + "'s" + historyNote(live), nil
	})
	r.run("service", func() ([]Finding, string, error) { return checkService(st, serr, o.CLI, o.DirectorConfig) })
	return r
}

// historyNote says, beside "the live tables are the config's", what the
// live tables remember of their rows' earlier primaries: history is not a
// difference from the config.
func historyNote(live loader.State) string {
	var notes []string
	for i, h := range live.Histories {
		if h.Empty() || i >= len(live.Tables) {
			continue
		}
		rows, hopRows, until := h.Summary()
		notes = append(notes, fmt.Sprintf("%s: %d rows remember an earlier primary, %d list one, until %s",
			table.DisplayName(live.Tables[i].Name, i), rows, hopRows, until.Format(time.RFC3339)))
	}
	if len(notes) == 0 {
		return ""
	}
	return "; history beside them: " + strings.Join(notes, "; ")
}

// encapSize is the most the encapsulation adds to a packet of tables:
// GLB's GUE, or over IPv6, with dc's hops and the longest chain of
// earlier primaries a table lists (history_hops), which any change may
// bring: what the underlay must carry, not only what it carries now.
func encapSize(dc *table.DirectorConfig, tables []*table.Table) int {
	size := 0
	for _, t := range tables {
		hops := 2
		if dc.AltHashFields != 0 {
			hops = 4
		}
		if t.History.Window > 0 && !t.History.NoHops {
			hops += table.HistoryHops
		}
		n := gue.Size(hops)
		if len(t.Backends) > 0 && !t.Backends[0].IP.Is4() {
			n = gue.Size6(hops)
		}
		size = max(size, n)
	}
	if size == 0 {
		size = gue.Size(2)
	}
	return size
}

// checkMTU finds an attached interface whose link MTU (bounded by
// outbound_mtu) cannot carry a client's full-size packet once
// encapsulated: such packets are answered with ICMP too-big, and clients
// behind a filter that drops it stall.
func checkMTU(dc *table.DirectorConfig, tables []*table.Table, atts []loader.Attachment, clientMTU int) ([]Finding, string, error) {
	need := clientMTU + encapSize(dc, tables)
	var fs []Finding
	var ok []string
	for _, a := range atts {
		if a.State != "attached" {
			continue
		}
		ifi, err := net.InterfaceByName(a.Interface)
		if err != nil {
			return nil, "", err
		}
		link, what := ifi.MTU, fmt.Sprintf("%s's MTU %d", a.Interface, ifi.MTU)
		if dc.OutboundMTU != 0 && dc.OutboundMTU < link {
			link, what = dc.OutboundMTU, fmt.Sprintf("outbound_mtu %d", dc.OutboundMTU)
		}
		if link < need {
			f := fixBy(fmt.Sprintf("%s leaves %d bytes for a client's packet, under the %d a client sends: full-size packets are answered with ICMP too-big, and stall where it is filtered",
				what, link-(need-clientMTU), clientMTU),
				" (and as much on the way to the backends)", shellword.Join("ip", "link", "set", "dev", a.Interface, "mtu", fmt.Sprint(need)))
			if link != ifi.MTU {
				f.Fix, f.Run = fmt.Sprintf("raise the underlay's MTU and outbound_mtu to %d", need), nil
			}
			fs = append(fs, f)
			continue
		}
		ok = append(ok, what)
	}
	if len(fs) == 0 && len(ok) == 0 {
		return skip("no interface attached")
	}
	return fs, fmt.Sprintf("%s: room for a %d-byte packet encapsulated (%d bytes)", strings.Join(ok, ", "), clientMTU, need), nil
}

// checkSources finds an outbound source address that is not this host's:
// backends' replies to health checks and ICMP errors go nowhere.
func checkSources(dc *table.DirectorConfig) ([]Finding, string, error) {
	srcs, err := loader.Sources(dc)
	if err != nil {
		return nil, "", err
	}
	var fs []Finding
	var ok []string
	for _, s := range srcs {
		if s.Iface != "" {
			ok = append(ok, fmt.Sprintf("%s %s on %s", s.Setting, s.Addr, s.Iface))
			continue
		}
		fs = append(fs, Finding{What: s.NotHere(),
			Fix: fmt.Sprintf("ip addr add %s dev IFACE, or set %s in director.conf to this host's address and director apply", s.Addr, s.Setting)})
	}
	return fs, strings.Join(ok, ", "), nil
}

// checkGateway finds a gateway MAC that no neighbour on an attached
// interface has: every GUE packet goes to a MAC nothing forwards. It is
// the IPv4 one, or with v6 the IPv6 underlay's (GatewayMAC6, else
// GatewayMAC). When the kernel has no entry for an interface's default
// gateway it sends it one UDP datagram (to its discard port), which makes
// the kernel resolve it.
func checkGateway(dc *table.DirectorConfig, atts []loader.Attachment, v6 bool) ([]Finding, string, error) {
	mac, family, key := dc.GatewayMAC, unix.AF_INET, "outbound_gateway_mac"
	if v6 {
		if !dc.SrcIP6.IsValid() {
			return skip("no IPv6 underlay (no outbound_src_ip6)")
		}
		family = unix.AF_INET6
		if len(dc.GatewayMAC6) == 6 {
			mac, key = dc.GatewayMAC6, "outbound_gateway_mac6"
		}
	} else if !dc.SrcIP.IsValid() {
		return skip("no IPv4 underlay (no outbound_src_ip)")
	}
	var fs []Finding
	var ok []string
	for _, a := range atts {
		if a.State != "attached" {
			continue
		}
		l, err := netlink.LinkByName(a.Interface)
		if err != nil {
			return nil, "", err
		}
		gw := defaultGateway(l, family)
		n, found, err := neighbourWith(l, family, mac, gw)
		if err != nil {
			return nil, "", err
		}
		if found {
			ok = append(ok, fmt.Sprintf("%s is %s's on %s (%s)", mac, n, a.Interface, n.state))
			continue
		}
		f := Finding{What: fmt.Sprintf("no neighbour on %s has the gateway MAC %s (%s): every GUE packet is sent to a MAC nothing there answers to", a.Interface, mac, key),
			Fix: fmt.Sprintf("set %s in director.conf to the router's MAC ('ip neigh show dev %s'), then director apply", key, a.Interface)}
		if gw.IsValid() {
			if gwMAC := n.gatewayMAC; gwMAC != nil {
				f.What = fmt.Sprintf("%s's default gateway %s has MAC %s, not the gateway MAC %s (%s): GUE packets go to a MAC nothing forwards", a.Interface, gw, gwMAC, mac, key)
				f.Fix = fmt.Sprintf("set %s to %s in director.conf, then director apply", key, gwMAC)
			} else {
				f.What = fmt.Sprintf("%s's default gateway %s does not resolve (no neighbour answers for it), and no neighbour has the gateway MAC %s (%s)", a.Interface, gw, mac, key)
				f.Fix = fmt.Sprintf("check the link to %s ('ip neigh show dev %s'), and set %s to the router's MAC", gw, a.Interface, key)
			}
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 && len(ok) == 0 {
		return skip("no interface attached")
	}
	return fs, strings.Join(ok, ", "), nil
}

// defaultGateway is the gateway of l's default route of family.
func defaultGateway(l netlink.Link, family int) netip.Addr {
	routes, err := netlink.RouteList(l, family)
	if err != nil {
		return netip.Addr{}
	}
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		if gw, ok := netip.AddrFromSlice(r.Gw); ok && r.Gw != nil {
			return gw.Unmap()
		}
	}
	return netip.Addr{}
}

type neighbourSeen struct {
	ip         netip.Addr
	state      string
	gatewayMAC net.HardwareAddr // the default gateway's, when it resolved
}

func (n neighbourSeen) String() string { return n.ip.String() }

const nudValid = unix.NUD_PERMANENT | unix.NUD_NOARP | unix.NUD_REACHABLE | unix.NUD_PROBE | unix.NUD_STALE | unix.NUD_DELAY

// neighbourWith finds a valid neighbour entry on l with mac. Without one,
// and when gw (the default gateway) has none either, it makes the kernel
// resolve gw and looks again.
func neighbourWith(l netlink.Link, family int, mac net.HardwareAddr, gw netip.Addr) (neighbourSeen, bool, error) {
	for try := 0; ; try++ {
		ns, err := netlink.NeighList(l.Attrs().Index, family)
		if err != nil {
			return neighbourSeen{}, false, fmt.Errorf("listing %s's neighbours: %w", l.Attrs().Name, err)
		}
		var seen neighbourSeen
		gwKnown := false
		for _, n := range ns {
			ip, _ := netip.AddrFromSlice(n.IP)
			if n.State&nudValid == 0 {
				continue
			}
			if bytes.Equal(n.HardwareAddr, mac) {
				return neighbourSeen{ip: ip.Unmap(), state: loader.NeighbourState(n.State)}, true, nil
			}
			if gw.IsValid() && ip.Unmap() == gw {
				seen.gatewayMAC, gwKnown = n.HardwareAddr, true
			}
		}
		if gwKnown || !gw.IsValid() || try == 10 {
			return seen, false, nil
		}
		if try == 0 {
			touch(gw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// touch sends a an empty UDP datagram to a's discard port, so that the
// kernel resolves a's neighbour entry.
func touch(a netip.Addr) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 9)))
	if err != nil {
		return
	}
	c.Write(nil)
	c.Close()
}

// checkService finds a 'director run' that is gone, and changes it holds
// for a person.
func checkService(st *status.Status, err error, cli, dc string) ([]Finding, string, error) {
	if err != nil {
		return nil, "", err
	}
	if st == nil {
		return skip("no director run serves these pins")
	}
	if st.Stale {
		return []Finding{{What: fmt.Sprintf("director run (pid %d) is gone: nothing checks backends or applies changes", st.PID),
			Fix: "systemctl restart director (journalctl -u director says why it stopped)"}}, "", nil
	}
	var fs []Finding
	for _, h := range st.Held {
		var names []string
		for _, t := range h.Tables {
			names = append(names, t.Name)
		}
		run := status.ReleaseCommands(cli, dc, st.Config, h.Health)
		n := len(run)
		fs = append(fs, Finding{What: fmt.Sprintf("director run holds a change of %s for a person: %s", strings.Join(names, ", "), strings.Join(h.Reasons, "; ")),
			Fix: fmt.Sprintf("%s, review it, %s (docs/operations.md, \"Held changes\")", strings.Join(run[:n-1], "; "), run[n-1]), Run: run})
	}
	return fs, fmt.Sprintf("director run (pid %d) serves these pins, holding nothing", st.PID), nil
}

// planApply are the commands that plan config (with the director config
// dc, if any: the plan carries it) into plan.json and apply it, spelled
// with cli.
func planApply(cli, dc, config string) (plan, apply string) {
	plan = cli
	if dc != "" {
		plan += " --director-config " + shellword.Join(dc)
	}
	return plan + " plan " + shellword.Join(config) + " -o plan.json", cli + " apply plan.json"
}
