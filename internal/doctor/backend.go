package doctor

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/shellword"
	"github.com/director/director/loader"
	"github.com/director/director/table"
)

// BackendOptions says what to check on a backend host.
type BackendOptions struct {
	BPFFS string
	// CLI is how the fixes spell a backend command: "director backend"
	// and the flags this doctor was given, so that a fix runs as printed
	// ("director backend" when "").
	CLI string
	// Kernel probes the kernel (loader.ProbeKernel when nil).
	Kernel func() (*loader.KernelSupport, error)
	// Tables are the forwarding table config's, when given: the VIPs of
	// the tables this host is a backend of must be on it, and the other
	// backends of those tables reachable for second chance. Config names
	// the config, for messages.
	Tables []table.TableConfig
	Config string
}

// Backend checks a backend host.
func Backend(o BackendOptions) *Report {
	if o.CLI == "" {
		o.CLI = "director backend"
	}
	if o.Kernel == nil {
		o.Kernel = loader.ProbeKernel
	}
	r := &Report{Host: "backend"}
	r.run("kernel", func() ([]Finding, string, error) {
		ks, err := o.Kernel()
		return checkKernel(ks, err, "backend")
	})
	b, err := loader.OpenBackend(o.BPFFS)
	r.run("loaded", func() ([]Finding, string, error) {
		if err != nil && strings.Contains(err.Error(), "no backend program is loaded") {
			return []Finding{{What: fmt.Sprintf("no backend program is loaded at %s: GUE packets are not decapsulated", o.BPFFS),
				Fix: o.CLI + " attach IFACE"}}, "", nil
		}
		if err != nil {
			return nil, "", err
		}
		return nil, "loaded at " + o.BPFFS, nil
	})
	if err != nil {
		return r
	}
	defer b.Close()
	atts, aerr := b.Attachments()
	var here []string
	for _, a := range atts {
		if a.State == "attached" {
			here = append(here, a.Interface)
		}
	}
	// The program's settings and accepted addresses, read as it reads
	// them for packets coming in by the first interface attached.
	var host *loader.BackendHost
	var herr error
	var keep []string
	if len(here) > 0 {
		host, herr = b.Host(here[0])
		if herr == nil {
			keep = keepTrust(host)
		}
	}
	// attach is each setting as given: a fix that attaches again keeps
	// the trusted list, or second chance would stop.
	attach := func(args ...string) string {
		return o.CLI + " attach " + shellword.Join(append(args, keep...)...)
	}
	r.run("attach-mode", func() ([]Finding, string, error) { return checkAttachments(atts, aerr, o.CLI, keep...) })
	r.run("veth-peer", func() ([]Finding, string, error) {
		return checkVethPeers(atts, aerr, "the second-chance packets the program sends on")
	})
	if len(here) == 0 {
		return r
	}
	r.run("second-chance", func() ([]Finding, string, error) {
		if herr != nil {
			return nil, "", herr
		}
		if !host.Config.SecondChance {
			return []Finding{fixBy("second chance is off: every GUE packet is taken here, and connections break when their row moves to another backend",
				" (without --no-second-chance)", attach(here[0]))}, "", nil
		}
		if !host.Config.TrustListed {
			return []Finding{{What: "second chance is off: the program was told of no directors and backends to trust (--trust), so it sends nothing on, " +
				"and connections break when their row moves to another backend",
				Fix: fmt.Sprintf("%s attach %s --trust DIRECTORS,BACKENDS (their addresses or prefixes)", o.CLI, shellword.Join(here[0]))}}, "", nil
		}
		return nil, fmt.Sprintf("on, trusting %d prefixes", len(host.Config.Trust)), nil
	})
	addrs, haerr := hostAddrs()
	r.run("self-address", func() ([]Finding, string, error) {
		if err := firstErr(herr, haerr); err != nil {
			return nil, "", err
		}
		var fs []Finding
		var ok []string
		for _, a := range []netip.Addr{host.Config.Self4, host.Config.Self6} {
			if !a.IsValid() {
				continue
			}
			if _, on := addrs[a]; !on {
				fs = append(fs, Finding{What: fmt.Sprintf("the program sends second-chance packets from %s, which is not an address of this host", a),
					Fix: attach(here[0]) + " --self <an address of this host>"})
				continue
			}
			ok = append(ok, a.String())
		}
		return fs, "forwards from " + strings.Join(ok, ", "), nil
	})
	r.run("accepted-addresses", func() ([]Finding, string, error) { return checkAccepted(host, herr, attach(here[0])) })
	r.run("forwarding", func() ([]Finding, string, error) { return checkForwarding(host, herr, here) })
	r.run("rp-filter", func() ([]Finding, string, error) { return checkRPFilter(here) })
	mine := servedTables(o.Tables, addrs)
	r.run("vip-on-host", func() ([]Finding, string, error) { return checkVIPsOnHost(o, mine, haerr, b, here[0], attach(here[0])) })
	r.run("next-hops", func() ([]Finding, string, error) { return checkNextHops(o, mine, host, herr) })
	return r
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkAccepted finds what the host's routing says is local that the
// program does not take GUE for: added after it was attached.
func checkAccepted(host *loader.BackendHost, herr error, attach string) ([]Finding, string, error) {
	if herr != nil {
		return nil, "", herr
	}
	local, err := loader.LocalPrefixes()
	if err != nil {
		return nil, "", err
	}
	var missing []string
	for _, p := range local {
		if a := p.Addr(); p.IsSingleIP() && (a == host.Config.Self4 || a == host.Config.Self6) {
			continue
		}
		if !slices.Contains(host.Accepts, p) {
			missing = append(missing, p.String())
		}
	}
	if len(missing) > 0 {
		return []Finding{fixBy(fmt.Sprintf("the program does not take GUE for %s, local since it was attached: packets for them are passed untouched, or dropped as not this host's (drop_not_local)", strings.Join(missing, ", ")),
			" (again; director backend run follows the host's addresses by itself)", attach)}, "", nil
	}
	return nil, fmt.Sprintf("takes GUE for all %d local prefixes of the host", len(local)), nil
}

// checkForwarding finds forwarding off on an attached interface for a
// family second chance forwards.
func checkForwarding(host *loader.BackendHost, herr error, ifaces []string) ([]Finding, string, error) {
	if herr != nil {
		return nil, "", herr
	}
	if !host.Config.SecondChance || !host.Config.TrustListed {
		return skip("second chance is off: nothing is forwarded")
	}
	var fs []Finding
	for _, iface := range ifaces {
		f, err := Forwarding(iface, host.Config.Self4.IsValid(), host.Config.Self6.IsValid())
		if err != nil {
			return nil, "", err
		}
		fs = append(fs, f...)
	}
	return fs, "forwarding on for " + strings.Join(ifaces, ", "), nil
}

// Forwarding finds forwarding off on iface for a family second chance
// forwards (v4, v6): the kernel's route lookup then refuses every next hop
// (drop_no_route). 'backend attach' warns of the same.
func Forwarding(iface string, v4, v6 bool) ([]Finding, error) {
	var fs []Finding
	for _, f := range []struct {
		on     bool
		family string
	}{{v4, "ipv4"}, {v6, "ipv6"}} {
		if !f.on {
			continue
		}
		v, name, err := sysctl("net", f.family, "conf", iface, "forwarding")
		if err != nil {
			return nil, err
		}
		if v != "1" {
			fs = append(fs, fixBy(fmt.Sprintf("%s is off: the kernel's route lookup refuses every second-chance next hop (drop_no_route)", name), "",
				sysctlFix(name, "1")))
		}
	}
	return fs, nil
}

// checkRPFilter finds strict reverse-path filtering on an attached
// interface: it drops a decapsulated packet whose client is not routed
// back out the interface it came in by (a second NIC, policy routing,
// asymmetric paths), which is how direct server return often looks.
func checkRPFilter(ifaces []string) ([]Finding, string, error) {
	all, allName, err := sysctl("net", "ipv4", "conf", "all", "rp_filter")
	if err != nil {
		return nil, "", err
	}
	var fs []Finding
	var ok []string
	for _, iface := range ifaces {
		v, name, err := sysctl("net", "ipv4", "conf", iface, "rp_filter")
		if err != nil {
			return nil, "", err
		}
		// The kernel takes the larger of all's and the interface's.
		if v == "1" || (all == "1" && v != "2") {
			fs = append(fs, fixBy(fmt.Sprintf("strict reverse-path filtering on %s (%s=%s, %s=%s): decapsulated packets whose client is not routed back out %s are dropped",
				iface, allName, all, name, v, iface),
				" (loose)", sysctlFix(allName, "2"), sysctlFix(name, "2")))
			continue
		}
		ok = append(ok, fmt.Sprintf("%s %s", iface, v))
	}
	return fs, "rp_filter " + strings.Join(ok, ", "), nil
}

// servedTables are the tables with a backend at one of addrs.
func servedTables(tables []table.TableConfig, addrs map[netip.Addr]string) []table.TableConfig {
	var out []table.TableConfig
	for _, t := range tables {
		if slices.ContainsFunc(t.Backends, func(b table.Backend) bool { _, ok := addrs[b.IP]; return ok }) {
			out = append(out, t)
		}
	}
	return out
}

// checkVIPsOnHost finds a VIP of a table this host serves that is not
// an address of the host: the decapsulated packet is not for it, and the
// program drops it (drop_not_local). Without a config, it reads that
// counter.
func checkVIPsOnHost(o BackendOptions, mine []table.TableConfig, aerr error, b *loader.BackendProgram, iface, attach string) ([]Finding, string, error) {
	if aerr != nil {
		return nil, "", aerr
	}
	if o.Tables == nil {
		c, err := b.Counters()
		if err != nil {
			return nil, "", err
		}
		if n := c["drop_not_local"]; n > 0 {
			return []Finding{{What: fmt.Sprintf("%d GUE packets were for addresses not on this host (drop_not_local): a VIP is missing, or was added after attach", n),
				Fix: fmt.Sprintf("ip addr add VIP/32 dev lo (or the VIP range's prefix), then %s again; '%s capture --action drop' shows the VIP", attach, o.CLI)}}, "", nil
		}
		return skip("no forwarding table config given (--config), and no packet dropped as not this host's")
	}
	if len(mine) == 0 {
		return []Finding{{What: fmt.Sprintf("no table of %s has this host as a backend", o.Config),
			Fix: "check this host's address against the config's backends"}}, "", nil
	}
	// Local as the kernel says: an address, or inside a prefix on lo.
	local, err := loader.LocalPrefixes()
	if err != nil {
		return nil, "", err
	}
	var fs []Finding
	var ok []string
	for _, t := range mine {
		for _, bd := range t.Binds {
			vip := bd.Prefix.Masked().Addr()
			name := vip.String()
			if bd.Prefix.Bits() < vip.BitLen() {
				name = bd.Prefix.Masked().String()
			}
			if slices.ContainsFunc(local, func(p netip.Prefix) bool { return p.Bits() <= bd.Prefix.Bits() && p.Contains(vip) }) {
				ok = append(ok, name)
				continue
			}
			fs = append(fs, fixBy(fmt.Sprintf("VIP %s of table %q is not local on this host: its packets are dropped here (drop_not_local)", name, t.Name), "",
				shellword.Join("ip", "addr", "add", onLo(bd.Prefix), "dev", "lo"), attach))
		}
	}
	return fs, "VIPs on this host: " + strings.Join(ok, ", "), nil
}

// keepTrust is the --trust argument that keeps host's list, if it has one.
func keepTrust(host *loader.BackendHost) []string {
	if !host.Config.TrustListed {
		return nil
	}
	return trustArg(host.Config.Trust)
}

// trustArg is --trust with the prefixes ps.
func trustArg(ps []netip.Prefix) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return []string{"--trust", strings.Join(s, ",")}
}

// onLo is what to add on lo for bind prefix p: the whole prefix, so that
// every address of it is local.
func onLo(p netip.Prefix) string {
	m := p.Masked()
	return fmt.Sprintf("%s/%d", m.Addr(), m.Bits())
}

// checkNextHops finds other backends of this host's tables that second
// chance cannot send to: the route lookup the program makes (as backend
// explain asks it) finds no way.
func checkNextHops(o BackendOptions, mine []table.TableConfig, host *loader.BackendHost, herr error) ([]Finding, string, error) {
	if herr != nil {
		return nil, "", herr
	}
	if o.Tables == nil {
		return skip("no forwarding table config given (--config)")
	}
	if !host.Config.SecondChance || !host.Config.TrustListed {
		return skip("second chance is off")
	}
	var fs []Finding
	seen := map[netip.Addr]bool{}
	n := 0
	// Backends not trusted, and the list that would trust them too.
	var untrusted []string
	trust := slices.Clone(host.Config.Trust)
	for _, t := range mine {
		for _, bk := range t.Backends {
			self := host.Config.Self4
			if !bk.IP.Is4() {
				self = host.Config.Self6
			}
			if seen[bk.IP] || !self.IsValid() || bk.IP == self || host.Accepted(bk.IP) {
				continue
			}
			seen[bk.IP] = true
			n++
			if !model.InPrefixes(host.Config.Trust, bk.IP) {
				untrusted = append(untrusted, fmt.Sprintf("%s (table %q)", bk.IP, t.Name))
				trust = append(trust, netip.PrefixFrom(bk.IP, bk.IP.BitLen()))
				continue
			}
			rt := host.Route(self, bk.IP)
			if rt.ForwardingOff {
				return skip("forwarding is off on " + host.Ingress.Name + ": the forwarding check says so, and what to do")
			}
			if rt.How == model.RouteNone {
				fs = append(fs, Finding{What: fmt.Sprintf("backend %s of table %q cannot be reached for second chance: %s (drop_no_route)", bk.IP, t.Name, rt.Why),
					Fix: fmt.Sprintf("give this host a route to %s out %s ('ip route get %s from %s')", bk.IP, host.Ingress.Name, bk.IP, self)})
			}
		}
	}
	if host.Err != nil {
		return nil, "", host.Err
	}
	if len(untrusted) > 0 {
		fs = append(fs, fixBy(fmt.Sprintf("backends %s are not among those this host trusts (--trust): second chance never sends to them (drop_untrusted_hop)", strings.Join(untrusted, ", ")),
			"", o.CLI+" attach "+shellword.Join(append([]string{host.Ingress.Name}, trustArg(trust)...)...)))
	}
	return fs, fmt.Sprintf("%d other backends reachable", n), nil
}
