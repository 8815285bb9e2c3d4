package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/explain"
	"github.com/director/director/loader"
)

// backendExplainHelp is 'backend explain's part of 'director help backend'.
const backendExplainHelp = "'backend explain FLOW' says what the backend program does with the GUE packet of a flow (tcp|udp|icmp\n" +
	"CLIENT[:PORT] VIP[:PORT]; --syn for a SYN, --hops the hop list after this host, --next its index, --to the\n" +
	"outer destination, default this host's own) or of --pcap FILE --packet N: take it (a SYN, a connection\n" +
	"this host has, not TCP, the last hop), forward it to the next hop and how, or drop it, and why. It asks\n" +
	"the kernel what the program asks it (sockets, routes, neighbours) and changes nothing."

// runBackendExplain is 'backend explain'.
func runBackendExplain(e *env, c *command, args []string) error {
	fs := e.flags(c)
	dir := fs.String("backend-bpffs", loader.BackendDir, "bpffs `DIR` the backend program is pinned in")
	asJSON := fs.Bool("json", false, "print a JSON document")
	pcap := fs.String("pcap", "", "take the GUE packet from capture `FILE`")
	n := fs.Int("packet", 1, "with --pcap, the `N`th packet (from 1)")
	syn := fs.Bool("syn", false, "the inner TCP segment is a SYN (default: an ACK)")
	hops := fs.String("hops", "", "the hops listed after this host, `IP,IP` (default: none)")
	next := fs.Int("next", 0, "the next-hop index of the GUE header")
	to := fs.String("to", "", "the outer destination `ADDR` (default: this host's, from backend attach)")
	from := fs.String("from", "", "the outer source `ADDR`, the director's (default: the first of the trusted (--trust) of its family,\n"+
		"else 192.0.2.1 or 2001:db8::1)")
	iface := fs.String("interface", "", "the interface the packet comes in by (default: the one attached)")
	pos, err := e.parse(fs, args, 0, 3)
	if err != nil {
		return err
	}
	if e.set["bpffs"] {
		*dir = e.bpffs
	}
	b, err := loader.OpenBackend(*dir)
	if err != nil {
		return err
	}
	defer b.Close()
	if *iface == "" {
		if *iface, err = attachedOne(b); err != nil {
			return fmt.Errorf("backend explain: %w", err)
		}
	}
	host, err := b.Host(*iface)
	if err != nil {
		return fmt.Errorf("backend explain: %w", err)
	}
	var frame []byte
	if *pcap != "" {
		if len(pos) > 0 || *syn || *hops != "" || *to != "" || *from != "" || *next != 0 {
			return errors.New("backend explain: a flow, --syn, --hops, --next, --to and --from do not go with --pcap")
		}
		frame, err = packetOf(*pcap, *n)
	} else {
		frame, err = gueFlowFrame(host, pos, *syn, *hops, *next, *to, *from)
	}
	if err != nil {
		return fmt.Errorf("backend explain: %w", err)
	}
	x := explain.ExplainBackend(host.Config, host, frame)
	if host.Err != nil {
		x.Doubt = host.Err.Error()
	}
	if *asJSON {
		return writeJSON(e.stdout, x)
	}
	printBackendExplain(e.stdout, &x, *iface)
	return nil
}

// attachedOne is the one interface the backend program is attached to
// here.
func attachedOne(b *loader.BackendProgram) (string, error) {
	atts, err := b.Attachments()
	if err != nil {
		return "", err
	}
	var here []string
	for _, a := range atts {
		if a.State == "attached" {
			here = append(here, a.Interface)
		}
	}
	switch len(here) {
	case 0:
		return "", errors.New("the backend program is attached to no interface here: say which one packets come in by with --interface")
	case 1:
		return here[0], nil
	}
	return "", fmt.Errorf("attached to %s: say which one the packet comes in by with --interface", strings.Join(here, ", "))
}

// gueFlowFrame is the director's GUE packet of a flow to this host: from
// --from, by default a trusted source (the first trusted prefix of the
// family's first address; with none listed, any source is taken, and the
// documentation address 192.0.2.1 or 2001:db8::1 stands in), to --to,
// this host's own address by default.
func gueFlowFrame(host *loader.BackendHost, pos []string, syn bool, hopList string, next int, to, from string) ([]byte, error) {
	flags := byte(0x10)
	if syn {
		flags = 0x02
	}
	inner, err := flowPacket(pos, 0, "", flags)
	if err != nil {
		return nil, err
	}
	dst := host.Config.Self4
	if !dst.IsValid() {
		dst = host.Config.Self6
	}
	if to != "" {
		if dst, err = netip.ParseAddr(to); err != nil {
			return nil, fmt.Errorf("--to: %w", err)
		}
	}
	if !dst.IsValid() {
		return nil, errors.New("the backend program has no address of its own: give --to")
	}
	hops := []netip.Addr{dst}
	if hopList != "" {
		for _, s := range strings.Split(hopList, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("--hops: %w", err)
			}
			if a.Is4() != dst.Is4() {
				return nil, fmt.Errorf("--hops: %s is not of the outer destination %s's family", a, dst)
			}
			hops = append(hops, a)
		}
	}
	if len(hops) > gue.MaxHops || next < 0 || next > 255 {
		return nil, fmt.Errorf("at most %d hops after this host, and --next 0 to 255", gue.MaxHops-1)
	}
	src := netip.MustParseAddr("192.0.2.1")
	etype := uint16(0x0800)
	if !dst.Is4() {
		src, etype = netip.MustParseAddr("2001:db8::1"), 0x86dd
	}
	if i := slices.IndexFunc(host.Config.Trust, func(p netip.Prefix) bool { return p.Addr().Is4() == dst.Is4() }); i >= 0 && host.Config.TrustListed {
		src = host.Config.Trust[i].Addr()
	}
	if from != "" {
		if src, err = netip.ParseAddr(from); err != nil {
			return nil, fmt.Errorf("--from: %w", err)
		}
		if src.Is4() != dst.Is4() {
			return nil, fmt.Errorf("--from: %s is not of the outer destination %s's family", src, dst)
		}
	}
	h := gue.Header{Src: src, Hops: hops, SourcePort: 0x8000, NextHop: uint8(next), Proto: gue.ProtoIPv4}
	if inner[0]>>4 == 6 {
		h.Proto = gue.ProtoIPv6
	}
	f := pkt.Eth(pkt.DirectorMAC, pkt.GatewayMAC, 0, etype, nil)
	f = h.Append(f, len(inner))
	return append(f, inner...), nil
}

func printBackendExplain(w io.Writer, x *explain.Backend, iface string) {
	fmt.Fprintf(w, "packet    %s (in by %s)\n", x.Packet, iface)
	if x.Outer != "" {
		hops := "none"
		if len(x.Hops) > 0 {
			hops = strings.Join(x.Hops, ", ")
		}
		by := ""
		if x.SecondChanceIn {
			by = " (sent on by another backend: second chance, counted as second_chance_in)"
		}
		fmt.Fprintf(w, "gue       for %s; hops listed: %s; next hop index %d%s\n", x.Outer, hops, x.Next, by)
	}
	if f := x.Flow; f != nil {
		fmt.Fprintf(w, "flow      %s %s -> %s\n", f.Proto, endpoint(f.Client, f.ClientPort, f.Proto), endpoint(f.VIP, f.VIPPort, f.Proto))
	}
	if x.Socket != "" {
		fmt.Fprintf(w, "socket    %s\n", x.Socket)
	}
	if x.NextHop != "" {
		fmt.Fprintf(w, "next hop  %s: %s\n", x.NextHop, x.Route)
	}
	fmt.Fprintf(w, "action    %s (%s, counted as %s): %s\n", x.Action, x.Verdict, x.Counter, x.Why)
	if x.Doubt != "" {
		fmt.Fprintf(w, "! a lookup failed, so this is partly a guess: %s\n", x.Doubt)
	}
}
