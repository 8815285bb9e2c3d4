package main

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/explain"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/loader"
)

var explainCmd = &command{
	uses: usesBPFFS,
	name: "explain", args: "tcp|udp|icmp CLIENT[:PORT] VIP[:PORT] [--length N] [--payload HEX] | --pcap FILE [--packet N]; [--interface IF] [--json]",
	summary: "Say what the live datapath does with one packet, and why.",
	help: "Say what the director does with a packet: the bind it matches (or why none does), the hash inputs,\n" +
		"the table, row and hops with each hop's state and health, the action (encapsulate, pass with a\n" +
		"reason, ICMP too-big) and the bytes it sends. It answers from the live maps and director config,\n" +
		"through the datapath's reference model, and changes nothing. The packet is a flow (a TCP ACK, a UDP\n" +
		"datagram or an ICMP echo request from CLIENT to VIP; --length pads the IP packet to N bytes,\n" +
		"--payload sets the TCP or UDP payload, such as a QUIC header) or the Nth packet of a capture. The\n" +
		"link MTU checked is --interface's, or that of the one interface the director is attached to.",
	run: runExplain,
}

func runExplain(e *env, c *command, args []string) error {
	fs := e.flags(c)
	asJSON := fs.Bool("json", false, "print a JSON document")
	pcap := fs.String("pcap", "", "take the packet from capture `FILE` (pcap or pcapng)")
	n := fs.Int("packet", 1, "with --pcap, the `N`th packet (from 1)")
	length := fs.Int("length", 0, "pad the IP packet to `N` bytes (0: no padding)")
	payload := fs.String("payload", "", "the TCP or UDP payload, in `HEX`")
	iface := fs.String("interface", "", "take the link MTU of interface `IF` (default: the one attached)")
	pos, err := e.parse(fs, args, 0, 3)
	if err != nil {
		return err
	}
	var frame []byte
	if *pcap != "" {
		if len(pos) > 0 || *length != 0 || *payload != "" {
			return errors.New("explain: a flow, --length and --payload do not go with --pcap")
		}
		frame, err = packetOf(*pcap, *n)
	} else {
		var ip []byte
		if ip, err = flowPacket(pos, *length, *payload, 0x10); err == nil { // an ACK: a packet of an established flow
			frame = pkt.Frame(ip)
		}
	}
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	d, err := e.open()
	if err != nil {
		return err
	}
	defer d.Close()
	dp, link, err := liveDatapath(d, *iface)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	if *pcap != "" {
		if in, h, ok := sentByDirector(frame, dp); ok {
			fmt.Fprintf(e.stderr, "director: note: packet %d of %s is GUE this director sent (from %s, as 'capture -w' writes them): explained is the packet it carries, as it came in\n",
				*n, *pcap, h.Src)
			frame = in
		}
	}
	if *pcap == "" && len(link.mac) == 6 {
		// A packet comes in to the interface's MAC, which the director's
		// packet then leaves from.
		copy(frame[0:6], link.mac)
	}
	mtuFrom := link.from
	x := explain.Explain(dp, frame)
	if *asJSON {
		return writeJSON(e.stdout, x)
	}
	printExplain(e.stdout, &x, mtuFrom)
	return nil
}

// flowPacket makes the IP packet of explain's flow arguments: PROTO
// CLIENT[:PORT] VIP[:PORT], with the TCP flags given, padded to length
// bytes.
func flowPacket(pos []string, length int, payloadHex string, tcpFlags byte) ([]byte, error) {
	if len(pos) != 3 {
		return nil, errors.New("give a flow (tcp|udp|icmp CLIENT[:PORT] VIP[:PORT]) or --pcap FILE")
	}
	client, cport, hasCPort, err := parseHostPort(pos[1])
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	vip, vport, hasVPort, err := parseHostPort(pos[2])
	if err != nil {
		return nil, fmt.Errorf("VIP: %w", err)
	}
	if client.Is4() != vip.Is4() {
		return nil, fmt.Errorf("client %s and VIP %s are of different families", client, vip)
	}
	payload, err := hex.DecodeString(payloadHex)
	if err != nil {
		return nil, fmt.Errorf("--payload: %w", err)
	}
	var l4 []byte
	var proto uint8
	switch pos[0] {
	case "tcp", "udp":
		if !hasCPort || !hasVPort {
			return nil, fmt.Errorf("a %s flow needs both ports: CLIENT:PORT VIP:PORT", pos[0])
		}
		proto, l4 = 6, pkt.TCP(cport, vport, tcpFlags, payload)
		if pos[0] == "udp" {
			proto, l4 = 17, pkt.UDP(cport, vport, payload)
		}
	case "icmp":
		if hasCPort || hasVPort || payloadHex != "" {
			return nil, errors.New("an ICMP echo request has no ports or payload to give")
		}
		proto, l4 = 1, pkt.ICMP(8, 0, 0x12340001, nil)
		if !vip.Is4() {
			proto, l4 = 58, pkt.ICMPv6(client, vip, 128, 0, 0x12340001, nil)
		}
	default:
		return nil, fmt.Errorf("%q: the protocol is tcp, udp or icmp", pos[0])
	}
	hdr := 20
	if !vip.Is4() {
		hdr = 40
	}
	if length != 0 {
		if length < hdr+len(l4) || length > 0xffff {
			return nil, fmt.Errorf("--length %d: the packet's headers take %d bytes, and an IP packet is at most 65,535", length, hdr+len(l4))
		}
		pad := make([]byte, length-hdr-len(l4))
		switch proto {
		case 6:
			l4 = pkt.TCP(cport, vport, tcpFlags, append(payload, pad...))
		case 17:
			l4 = pkt.UDP(cport, vport, append(payload, pad...))
		case 1:
			l4 = pkt.ICMP(8, 0, 0x12340001, pad)
		case 58:
			l4 = pkt.ICMPv6(client, vip, 128, 0, 0x12340001, pad)
		}
	}
	if vip.Is4() {
		return pkt.IPv4(client, vip, proto, l4, pkt.V4Opts{FragOff: 0x4000}), nil // DF, as TCP stacks send
	}
	return pkt.IPv6(client, vip, proto, l4), nil
}

// sentByDirector is the frame the director took in, for a frame it sent:
// GUE from its own outbound source, no hop taken yet. The inner packet
// comes back behind the Ethernet header it came in with: to the MAC the
// director sent from (its interface's), from a made-up one, with the same
// 802.1Q tag.
func sentByDirector(f []byte, dp *model.Datapath) ([]byte, gue.Header, bool) {
	h, inner, err := gue.ParseFrame(f)
	if err != nil || h.NextHop != 0 || (h.Src != dp.Config.SrcIP && h.Src != dp.Config.SrcIP6) {
		return nil, h, false
	}
	etype := uint16(0x0800)
	if h.Proto == 41 {
		etype = 0x86dd
	}
	vlan := 0
	if f[12] == 0x81 && f[13] == 0 {
		vlan = int(binary.BigEndian.Uint16(f[14:]) & 0xfff)
	}
	return pkt.Eth([6]byte(f[6:12]), pkt.ClientMAC, vlan, etype, f[inner:]), h, true
}

// packetOf reads the nth packet of a capture.
func packetOf(path string, n int) ([]byte, error) {
	if n < 1 {
		return nil, fmt.Errorf("--packet %d: packets count from 1", n)
	}
	r, err := pcapfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var frame []byte
	var rerr error
	err = r.Guard(func() {
		for {
			var p pcapfile.Packet
			if p, rerr = r.Read(); rerr != nil {
				return
			}
			if p.N == n {
				frame = p.Frame
				return
			}
		}
	})
	if err == nil {
		err = rerr
	}
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: --packet %d: the capture has %d packets", path, n, r.Count())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return frame, nil
}

// liveDatapath is the reference model configured with what d holds, its
// device MTU that of iface, or of the one interface d is attached to
// (none attached: not checked, as BPF_PROG_RUN's loopback does not). It
// says where the MTU came from, and the interface's MAC.
func liveDatapath(d *loader.Director, iface string) (*model.Datapath, linkOf, error) {
	var none linkOf
	live, err := d.LiveState()
	if err != nil {
		return nil, none, err
	}
	if live.Config == nil {
		return nil, none, errors.New("no director config is applied: the director steers nothing until 'director apply' writes one")
	}
	var gw [6]byte
	copy(gw[:], live.Config.GatewayMAC)
	dp := model.New(*live.Config, gw, live.Tables)
	from := linkOf{from: "no interface attached: only outbound_mtu limits the link"}
	if iface == "" {
		atts, err := d.Attachments()
		if err != nil {
			return nil, none, err
		}
		var here []string
		for _, a := range atts {
			if a.State == "attached" {
				here = append(here, a.Interface)
			}
		}
		switch len(here) {
		case 0:
			return dp, from, nil
		case 1:
			iface = here[0]
		default:
			return nil, none, fmt.Errorf("attached to %s: say which one the packet comes in by with --interface", strings.Join(here, ", "))
		}
	}
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, none, fmt.Errorf("--interface %s: %w", iface, err)
	}
	dp.DeviceMTU = ifi.MTU
	return dp, linkOf{from: fmt.Sprintf("%s's MTU %d", iface, ifi.MTU), mac: ifi.HardwareAddr}, nil
}

// linkOf is what explain takes of the interface a packet comes in by:
// where its MTU is from, and its MAC (none without an interface).
type linkOf struct {
	from string
	mac  net.HardwareAddr
}

func printExplain(w io.Writer, x *explain.Director, mtuFrom string) {
	fmt.Fprintf(w, "packet    %s\n", x.Packet)
	if f := x.Flow; f != nil {
		fmt.Fprintf(w, "flow      %s %s -> %s\n", f.Proto, endpoint(f.Client, f.ClientPort, f.Proto), endpoint(f.VIP, f.VIPPort, f.Proto))
	}
	switch {
	case x.Bind != nil:
		echo := ""
		if x.Flow != nil && strings.HasSuffix(x.Flow.Proto, "echo") {
			echo = ": an echo request follows the most specific bind of its address"
		}
		fmt.Fprintf(w, "bind      %s of table %s (tables[%d])%s\n", x.Bind.Bind, x.Bind.Table, x.Bind.TableIndex, echo)
	case x.NoBind != "":
		fmt.Fprintf(w, "bind      none: %s\n", x.NoBind)
	}
	if h := x.Hash; h != nil {
		fmt.Fprintf(w, "hash      %s -> row %#04x\n", strings.Join(h.Inputs, ", "), h.Row)
		if h.AltRow != nil {
			fmt.Fprintf(w, "alt hash  %s -> row %#04x\n", strings.Join(h.AltInputs, ", "), *h.AltRow)
		}
	}
	if x.QUIC != "" {
		fmt.Fprintf(w, "quic      %s\n", x.QUIC)
	}
	for _, h := range x.Hops {
		by := ""
		if h.ByCID {
			by = ", chosen by the QUIC connection ID"
		}
		fmt.Fprintf(w, "%-9s %s (backends[%d]: %s, %s, weight %d%s)\n", hopLabel(h.Role), h.Addr, h.Backend, h.State, healthWord(h.Healthy), h.Weight, by)
	}
	fmt.Fprintf(w, "action    %s (%s, counted as %s): %s\n", x.Action, x.Verdict, x.Counter, x.Why)
	if x.LinkMTU != 0 {
		fmt.Fprintf(w, "mtu       %d (%s)\n", x.LinkMTU, mtuFrom)
	}
	fmt.Fprintf(w, "out       %s\n", x.OutPacket)
	for off := 0; off < len(x.Out); off += 16 {
		fmt.Fprintf(w, "  %04x   % x\n", off, x.Out[off:min(off+16, len(x.Out))])
	}
}

func endpoint(a string, port uint16, proto string) string {
	if strings.HasPrefix(proto, "icmp") {
		return a
	}
	if strings.Contains(a, ":") {
		return fmt.Sprintf("[%s]:%d", a, port)
	}
	return fmt.Sprintf("%s:%d", a, port)
}

func hopLabel(role string) string {
	if role == "primary" || role == "secondary" {
		return role
	}
	return strings.ReplaceAll(role, " ", "-")
}
