package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/director/director/internal/doctor"
	"github.com/director/director/loader"
)

var backendCmd = &command{
	uses: usesBPFFS,
	name: "backend", args: "attach IFACE [--mode native|generic] [--self IP] [--trust PREFIXES] [--no-second-chance] | detach IFACE | unload | status [--json] | capture [CAPTURE FLAGS] [EXPRESSION] | explain FLOW|--pcap FILE | doctor [--config CONFIG] | run --attach IFACE [--metrics ADDR:PORT]  [--bpffs DIR | --backend-bpffs DIR]",
	summary: "Run GLB's proxy side (GUE decapsulation, second chance) on a backend host.",
	help: "Run GLB's proxy side in eBPF on a backend host: decapsulate GUE packets for this host's\n" +
		"connections and new ones, forward the others to the next hop of GLB's hop list (second chance).\n" +
		"GUE (over IPv4, and over IPv6: director's extension) is accepted for the addresses the host has,\n" +
		"IPv4 and IPv6, when 'backend attach' runs (run it again after adding one); second chance forwards\n" +
		"from --self (or the interface's addresses), and needs forwarding on for each family it forwards\n" +
		"(attach says so: net.ipv4.conf.IFACE.forwarding, net.ipv6.conf.all.forwarding). Second chance sends\n" +
		"on only between hosts --trust lists (the directors and the other backends); with --trust, GUE from any\n" +
		"other source is dropped, and without it nothing is sent on (docs/operations.md). Pinned under --bpffs or --backend-bpffs (default " + loader.BackendDir + "); no kernel module needed.\n" +
		"'backend capture' is 'director capture' for the backend program: the GUE packets it decapsulates\n" +
		"(as the stack gets them), forwards (second chance, as they leave) and drops, with the reason; with\n" +
		"--action, every packet of those verdicts, not GUE ones included. Its flags are capture's, but\n" +
		"--table and --backend.\n" + backendExplainHelp + "\n" +
		"'backend doctor' checks this backend host: the kernel, the program's attachments, second chance, its\n" +
		"own address, the addresses it takes GUE for (one added since attach), forwarding, rp_filter, and\n" +
		"with --config the VIPs of the tables it serves (on this host?) and their other backends (reachable for\n" +
		"second chance?). Each problem comes with its fix. Exit 0: nothing found; 1: problems; 2: a check could\n" +
		"not be made.\n" + backendRunHelp,
	run: runBackend,
}

// backendSubs are the backend subcommands with flags of their own.
var backendSubs = []struct {
	name string
	run  func(*env, *command, []string) error
}{
	{"capture", runBackendCapture}, {"explain", runBackendExplain}, {"doctor", runBackendDoctor}, {"run", runBackendRun},
}

func runBackend(e *env, c *command, args []string) error {
	for _, sub := range backendSubs {
		if rest, ok := backendSubArgs(args, sub.name); ok {
			return sub.run(e, c, rest)
		}
	}
	fs := e.flags(c)
	dir := fs.String("backend-bpffs", loader.BackendDir, "bpffs `DIR` the backend program is pinned in")
	mode := fs.String("mode", loader.ModeNative, "XDP `MODE` for attach: native or generic")
	self := fs.String("self", "", "this host's `ADDR`, IPv4 or IPv6, the source of forwarded packets (default: the interface's first\n"+
		"IPv4 address, and its IPv6 one for GUE over IPv6)")
	asJSON := fs.Bool("json", false, "status as JSON")
	trust := trustFlag(fs)
	noSecond := fs.Bool("no-second-chance", false, "for attach: decapsulate every GUE packet and never forward one to the next hop,\n"+
		"as a backend without GLB's proxy logic does: established connections break when their row moves (for testing)")
	pos, err := e.parse(fs, args, 1, 2)
	if err != nil {
		return err
	}
	// --bpffs names the backend's pin directory here, as --backend-bpffs
	// does (the older name, kept).
	if e.set["bpffs"] {
		if e.set["backend-bpffs"] && *dir != e.bpffs {
			return fmt.Errorf("backend: --bpffs %s and --backend-bpffs %s: give one", e.bpffs, *dir)
		}
		*dir = e.bpffs
	}
	switch {
	case pos[0] == "attach" && len(pos) == 2:
		ps, err := parseTrust(*trust)
		if err != nil {
			return fmt.Errorf("backend attach: %w", err)
		}
		return backendAttach(e, *dir, pos[1], *mode, *self, !*noSecond, ps)
	case pos[0] == "detach" && len(pos) == 2:
		return backendDetach(e, *dir, pos[1])
	case pos[0] == "unload" && len(pos) == 1:
		return unloadPins(e, *dir, loader.KindBackend)
	case pos[0] == "status" && len(pos) == 1:
		return backendStatus(e, *dir, *asJSON)
	}
	return fmt.Errorf("backend: want attach IFACE, detach IFACE, unload, status, capture, explain, doctor or run")
}

// backendDetach is 'backend detach IFACE': the program stays loaded.
func backendDetach(e *env, dir, iface string) error {
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return fmt.Errorf("backend: %s is not attached: no backend program is loaded at %s", iface, dir)
	}
	if err := loader.CheckNoRun(dir, "backend detach"); err != nil {
		return err
	}
	b, err := loader.OpenBackend(dir)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Detach(iface); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "detached from %s; the program stays loaded at %s ('director backend unload' removes it)\n", iface, dir)
	return nil
}

// backendSubArgs says whether args are those of subcommand sub, one with
// flags of its own (capture, explain), which may follow the pin
// directory's flags (as the other subcommands may), and gives its
// arguments with those flags in front.
func backendSubArgs(args []string, sub string) ([]string, bool) {
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		switch {
		case args[i] == sub:
			return append(append([]string{}, args[:i]...), args[i+1:]...), true
		case !strings.HasPrefix(args[i], "-"):
			return nil, false
		case a == "backend-bpffs" || a == "bpffs":
			i++ // its value
		case strings.HasPrefix(a, "backend-bpffs=") || strings.HasPrefix(a, "bpffs="):
		default:
			return nil, false
		}
	}
	return nil, false
}

// runBackendCapture is 'backend capture'.
func runBackendCapture(e *env, c *command, args []string) error {
	fs := e.flags(c)
	dir := fs.String("backend-bpffs", loader.BackendDir, "bpffs `DIR` the backend program is pinned in")
	o := captureFlags(fs)
	pos, err := e.parse(fs, args, 0, -1)
	if err != nil {
		return err
	}
	if e.set["bpffs"] {
		*dir = e.bpffs
	}
	if *o.table != "" || *o.backend != "" {
		return errors.New("backend capture: --table and --backend are the director's; a backend has neither")
	}
	f, err := o.filter("backend capture")
	if err != nil {
		return err
	}
	if *o.actions == "" {
		// GUE packets for this host, whatever became of them.
		names := loader.BackendCounterNames()
		for i, n := range names {
			if strings.HasPrefix(n, "decap_") || strings.HasPrefix(n, "drop_") || n == "forwarded" {
				f.Reasons = append(f.Reasons, i)
			}
		}
	}
	if _, err := os.Stat(*dir); os.IsNotExist(err) {
		return fmt.Errorf("backend capture: no backend program is loaded at %s", *dir)
	}
	b, err := loader.OpenBackend(*dir)
	if err != nil {
		return err
	}
	defer b.Close()
	atts, err := b.Attachments()
	if err != nil {
		return err
	}
	return runCaptureLoop(e, o, pos, f, atts, loader.BackendCounterNames(), func(f loader.CaptureFilter) (*loader.Capture, error) { return b.Capture(f) },
		func(int) capturedTable { return capturedTable{} })
}

// trustFlag is --trust, for 'backend attach' and 'backend run'.
func trustFlag(fs *flag.FlagSet) *string {
	return fs.String("trust", "", "the directors and the other backends, `PREFIXES` (addresses or prefixes, comma-separated): GUE is\n"+
		"taken only from them and sent on only to them (default: none listed: taken from any source, never sent on)")
}

// parseTrust reads --trust: addresses (a /32 or /128 each) and prefixes.
func parseTrust(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("--trust: %q: not an address or a prefix", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("--trust: %q: give an IPv4-mapped address as IPv4", f)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("--trust: %q: has bits set past its length (%s?)", f, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

func backendAttach(e *env, dir, iface, mode, self string, secondChance bool, trust []netip.Prefix) error {
	if err := loader.CheckNoRun(dir, "backend attach"); err != nil {
		return err
	}
	b, err := loader.LoadBackend(dir)
	if err != nil {
		return err
	}
	defer b.Close()
	for _, r := range b.Repaired {
		fmt.Fprintf(e.stderr, "director: %s\n", r)
	}
	s := loader.BackendSetup{Iface: iface, Mode: mode, SecondChance: secondChance, Trust: trust}
	if self != "" {
		if s.Self, err = netip.ParseAddr(self); err != nil {
			return fmt.Errorf("backend: --self: %w", err)
		}
	}
	a, selves, err := b.Setup(s)
	if err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	addr := selves[0]
	accepted, err := b.Accepted()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "backend program attached to %s in %s mode (link %d); forwarded packets leave from %s; GUE accepted for %s\n",
		a.Interface, a.Mode, a.LinkID, addr, joinAddrs(accepted))
	for _, w := range a.Warnings {
		fmt.Fprintf(e.stderr, "director: warning: %s\n", w)
	}
	switch {
	case !secondChance:
		fmt.Fprintln(e.stderr, "director: warning: second chance is off: every GUE packet is decapsulated here, and connections break when their row moves to another backend")
	case len(trust) == 0:
		fmt.Fprintln(e.stderr, "director: warning: second chance is off: no directors and backends listed to trust (--trust), so nothing is sent on, "+
			"and connections break when their row moves to another backend")
	default:
		fmt.Fprintf(e.stdout, "GUE taken from, and sent on to, only %s\n", joinAddrs(trust))
	}
	for _, w := range backendWarnings(iface, a.Mode, s.Forwards(), selves) {
		fmt.Fprintf(e.stderr, "director: warning: %s\n", w)
	}
	return nil
}

// backendWarnings are what would keep an attached backend program from
// doing its work: forwarding off for a family it forwards second-chance
// packets over (IPv4 on the interface, IPv6 for the host), and a native
// veth whose peer drops what it sends on.
func backendWarnings(iface, mode string, secondChance bool, selves []netip.Addr) []string {
	var out []string
	if secondChance {
		fs, _ := doctor.Forwarding(iface, slices.ContainsFunc(selves, netip.Addr.Is4), slices.ContainsFunc(selves, netip.Addr.Is6))
		for _, f := range fs {
			out = append(out, f.What+"; fix: "+f.Fix)
		}
	}
	if w := vethWarning(iface, mode, "the second-chance packets the program sends on", "director backend status"); w != "" {
		out = append(out, w)
	}
	return out
}

func backendStatus(e *env, dir string, asJSON bool) error {
	b, err := loader.OpenBackend(dir) // status reads; it loads nothing
	if err != nil {
		return err
	}
	defer b.Close()
	atts, err := b.Attachments()
	if err != nil {
		return err
	}
	counters, err := b.Counters()
	if err != nil {
		return err
	}
	accepted, err := b.Accepted()
	if err != nil {
		return err
	}
	second, err := b.SecondChance()
	if err != nil {
		return err
	}
	trusted, err := b.Trusted()
	if err != nil {
		return err
	}
	if asJSON {
		if atts == nil {
			atts = []loader.Attachment{}
		}
		return writeJSON(e.stdout, map[string]any{"version": 1, "attachments": atts, "accepts": strs(accepted), "trusts": strs(trusted),
			"second_chance": second, "counters": counters})
	}
	for _, a := range atts {
		fmt.Fprintf(e.stdout, "%s\n", attachmentLine(a))
	}
	fmt.Fprintf(e.stdout, "accepts GUE for %s\n", joinAddrs(accepted))
	switch {
	case second:
		fmt.Fprintf(e.stdout, "trusts %s: GUE is taken only from them, and sent on only to them\n", joinAddrs(trusted))
		fmt.Fprintln(e.stdout, "second chance on: packets of connections this host does not know go to the next hop")
	case len(trusted) == 0:
		fmt.Fprintln(e.stdout, "trusts nobody listed (--trust): GUE is taken from any source")
		fmt.Fprintln(e.stdout, "second chance OFF: with no directors and backends listed to trust, nothing is sent on")
	default:
		fmt.Fprintf(e.stdout, "trusts %s: GUE is taken only from them\n", joinAddrs(trusted))
		fmt.Fprintln(e.stdout, "second chance OFF: every GUE packet is decapsulated here")
	}
	for _, n := range loader.BackendCounterNames() {
		fmt.Fprintf(e.stdout, "%-16s %12d\n", n, counters[n])
	}
	return nil
}

func joinAddrs[T fmt.Stringer](as []T) string { return strings.Join(strs(as), ", ") }

// strs are as, as strings (a JSON list, never null).
func strs[T fmt.Stringer](as []T) []string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return s
}
