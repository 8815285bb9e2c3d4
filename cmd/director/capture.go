package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/format/pcapfilter"
	"github.com/director/director/loader"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

var captureCmd = &command{
	uses:    usesBPFFS,
	name:    "capture",
	args:    "[-w FILE|-] [-c COUNT] [--action tx,pass,drop,aborted|all] [--table NAME] [--backend IP] [--snaplen N] [--interface IFACE] [--rate N] [EXPRESSION]",
	summary: "Capture what the XDP program does to live traffic: the packets it sends, as they leave, and the ones it passes.",
	help: "Capture frames from the loaded director as the program is done with them: steered ones as they\n" +
		"leave (outer IPv4 or IPv6, UDP, GUE with the hop list, then the client's packet), passed ones with\n" +
		"their reason, on every attached interface (--interface: one). Without -w, a line per packet, as\n" +
		"tcpdump prints, with what the program decided: verdict or pass reason, table, row, primary and\n" +
		"secondary; for UDP to a table with QUIC-LB routing, 'quic routed' (the connection ID chose the\n" +
		"primary) or 'quic fallback REASON' (the row did), and the destination connection ID. -w FILE writes pcap (pcapng when FILE ends in .pcapng, with the decision as each\n" +
		"packet's comment), mode 0600; -w - writes pcap to stdout, for '| tcpdump -r -'. EXPRESSION is a\n" +
		"tcpdump filter (compiled by libpcap: Debian's libpcap0.8), matched against the packet as captured.\n" +
		"--action, --table and --backend (the primary) are decided in the kernel, before a frame is copied,\n" +
		"and --rate caps the frames each CPU keeps a second, so a capture at line rate cannot starve the\n" +
		"datapath; what it could not keep is counted and said when it ends. -c or Ctrl-C ends it, and the\n" +
		"datapath is left as it was (if the process dies, the program turns the hook off by itself).\n" +
		"Needs root. A client's flow from packet to backend: 'director show CONFIG --lookup 203.0.113.7:40000\n" +
		"--to VIP:80' names its row and hops; 'director capture --table web | grep \"ipv4 203.0.113.7 \"' shows\n" +
		"where its packets go (an expression sees a GUE packet's outer headers: 'udp port 19523 and dst host\n" +
		"BACKEND'); on the backend, 'director backend capture' shows them decapsulated, forwarded or dropped.",
	run: runCapture,
}

// captureOpts are the flags 'capture' and 'backend capture' share.
type captureOpts struct {
	write, actions, table, backend, iface *string
	count, snaplen, rate                  *int
}

func captureFlags(fs *flag.FlagSet) *captureOpts {
	return &captureOpts{
		write:   fs.String("w", "", "write pcap to `FILE` (pcapng if it ends in .pcapng; - for stdout)"),
		count:   fs.Int("c", 0, "stop after `COUNT` packets (0: until interrupted)"),
		actions: fs.String("action", "", "the verdicts captured: a comma-separated `LIST` of tx, pass, drop, aborted, redirect, or all (default all)"),
		table:   fs.String("table", "", "capture only the table `NAME`'s packets"),
		backend: fs.String("backend", "", "capture only packets whose primary is `IP`"),
		iface:   fs.String("interface", "", "capture only packets that came in by `IFACE`"),
		snaplen: fs.Int("snaplen", 65535, "keep `N` bytes of each packet"),
		rate:    fs.Int("rate", 5000, "keep at most `N` packets a second on each CPU (0: no cap)"),
	}
}

var actionNames = map[string]int{"aborted": 0, "drop": 1, "pass": 2, "tx": 3, "redirect": 4}

func actionName(a int) string {
	for n, v := range actionNames {
		if v == a {
			return n
		}
	}
	return fmt.Sprintf("action %d", a)
}

// filter is the flags as a kernel prefilter, and the userspace rest.
func (o *captureOpts) filter(what string) (loader.CaptureFilter, error) {
	f := loader.CaptureFilter{Table: -1, Rate: *o.rate, Snaplen: *o.snaplen}
	switch {
	case *o.count < 0:
		return f, fmt.Errorf("%s: -c %d: must be 0 or more", what, *o.count)
	case *o.snaplen <= 0 || *o.snaplen > 65535:
		return f, fmt.Errorf("%s: --snaplen %d: must be from 1 to 65535", what, *o.snaplen)
	case *o.rate < 0:
		return f, fmt.Errorf("%s: --rate %d: must be 0 (no cap) or more", what, *o.rate)
	}
	if *o.actions != "" && *o.actions != "all" {
		for _, a := range strings.Split(*o.actions, ",") {
			v, ok := actionNames[strings.TrimSpace(a)]
			if !ok {
				return f, fmt.Errorf("%s: --action %q: want tx, pass, drop, aborted, redirect or all", what, a)
			}
			f.Actions = append(f.Actions, v)
		}
	}
	if *o.backend != "" {
		a, err := netip.ParseAddr(*o.backend)
		if err != nil {
			return f, fmt.Errorf("%s: --backend %q is not an IP address", what, *o.backend)
		}
		f.Backend = a.Unmap()
	}
	return f, nil
}

func runCapture(e *env, c *command, args []string) error {
	fs := e.flags(c)
	o := captureFlags(fs)
	pos, err := e.parse(fs, args, 0, -1)
	if err != nil {
		return err
	}
	f, err := o.filter("capture")
	if err != nil {
		return err
	}
	d, err := e.open()
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := tableNames(d)
	if err != nil {
		return err
	}
	if *o.table != "" {
		slot := -1
		var known []string
		for s, n := range names {
			known = append(known, n.name)
			if n.name == *o.table {
				slot = s
			}
		}
		if slot < 0 {
			sort.Strings(known)
			return fmt.Errorf("capture: --table %q: no such live table (live: %s)", *o.table, strings.Join(known, ", "))
		}
		f.Table = slot
	}
	if err := checkCaptureBackend(d, f); err != nil {
		return err
	}
	atts, err := d.Attachments()
	if err != nil {
		return err
	}
	return runCaptureLoop(e, o, pos, f, atts, loader.CounterNames(), func(f loader.CaptureFilter) (*loader.Capture, error) { return d.Capture(f) },
		func(slot int) capturedTable {
			if n, ok := names[slot]; ok {
				return n
			}
			if fresh, err := tableNames(d); err == nil {
				names = fresh
			}
			return names[slot]
		})
}

// capturedTable is what a capture prints of a live table: its name, and
// its QUIC-LB routing's ID length.
type capturedTable struct {
	name string
	quic table.QUIC
}

// tableNames are the live tables by slot.
func tableNames(d *loader.Director) (map[int]capturedTable, error) {
	live, err := d.Live()
	if err != nil {
		return nil, err
	}
	out := map[int]capturedTable{}
	for _, lt := range live {
		out[lt.Slot] = capturedTable{name: displayName(lt), quic: lt.Table.QUIC}
	}
	return out, nil
}

// checkCaptureBackend refuses a --backend that no live table (or not
// f.Table's) has: its capture would wait for a packet that never comes.
func checkCaptureBackend(d *loader.Director, f loader.CaptureFilter) error {
	if !f.Backend.IsValid() {
		return nil
	}
	live, err := d.Live()
	if err != nil {
		return err
	}
	for _, lt := range live {
		if f.Table >= 0 && lt.Slot != f.Table {
			continue
		}
		for _, b := range lt.Table.Backends {
			if b.IP == f.Backend {
				return nil
			}
		}
	}
	if f.Table >= 0 {
		return fmt.Errorf("capture: --backend %s: the table has no such backend, so nothing would be captured ('director status' lists its backends)", f.Backend)
	}
	return fmt.Errorf("capture: --backend %s: no live table has such a backend, so nothing would be captured ('director status' lists them)", f.Backend)
}

func displayName(lt mapimage.LiveTable) string {
	if lt.Table.Name != "" {
		return lt.Table.Name
	}
	return fmt.Sprintf("tables[%d]", lt.Index)
}

// capture runs a capture to its end: -c packets written, or a signal.
// atts name the interfaces by index, as they were attached (another
// namespace's index means nothing in this one).
func runCaptureLoop(e *env, o *captureOpts, exprWords []string, f loader.CaptureFilter, atts []loader.Attachment, reasons []string,
	start func(loader.CaptureFilter) (*loader.Capture, error), tableOf func(int) capturedTable) error {
	var match *pcapfilter.Filter
	if expr := strings.Join(exprWords, " "); expr != "" {
		var err error
		if match, err = pcapfilter.Compile(expr, *o.snaplen); err != nil {
			return fmt.Errorf("capture: %w", err)
		}
	}
	ifaces, ifindex, err := captureInterfaces(atts, *o.iface)
	if err != nil {
		return err
	}
	out, closeOut, err := captureOutput(e, *o.write, *o.snaplen, ifaces)
	if err != nil {
		return err
	}
	capt, err := start(f)
	if err != nil {
		closeOut()
		return err
	}
	// Armed: a packet from now on is captured. Said, for whoever waits
	// to send traffic until then (make lab's guide does).
	on := "every attached interface"
	if ifindex != 0 {
		on = ifaces[ifindex]
	}
	fmt.Fprintf(e.stderr, "capture: listening on %s\n", on)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	done := make(chan struct{})
	go func() {
		select {
		case <-sig:
		case <-done:
		}
		capt.Close() // Read returns os.ErrClosed
	}()
	seen, kept, readErr := captureRead(capt, *o.count, func(r loader.CaptureRecord) bool {
		return (ifindex == 0 || r.Ifindex == ifindex) && (match == nil || match.Match(r.Frame))
	}, func(r loader.CaptureRecord) error { return out(r, describeCapture(r, reasons, tableOf)) })
	close(done)
	loss, err := capt.Close()
	if err == nil {
		err = closeOut()
	} else {
		closeOut()
	}
	fmt.Fprintf(e.stderr, "capture: %d packets captured, %d shown; lost %d (%d over the rate cap, %d refused by the kernel's buffer, %d read too late)\n",
		seen, kept, loss.Total(), loss.RateCapped, loss.Refused, loss.Lost)
	if readErr != nil {
		return fmt.Errorf("capture: %w", readErr)
	}
	return err
}

// captureRead reads frames until count were kept (0: until the capture
// is closed), keeping those keep takes, each given to out: how many were
// seen and kept, and what ended it other than the capture's close.
func captureRead(capt *loader.Capture, count int, keep func(loader.CaptureRecord) bool, out func(loader.CaptureRecord) error) (seen, kept int, err error) {
	for count == 0 || kept < count {
		r, rerr := capt.Read()
		if rerr != nil {
			if !errors.Is(rerr, os.ErrClosed) {
				err = rerr
			}
			return seen, kept, err
		}
		seen++
		if !keep(r) {
			continue
		}
		kept++
		if err := out(r); err != nil {
			return seen, kept, err
		}
	}
	return seen, kept, nil
}

// captureInterfaces names the attached interfaces by index, as they were
// attached (another namespace's index means nothing in this one), and
// gives --interface's index (0: every interface).
func captureInterfaces(atts []loader.Attachment, iface string) (map[int]string, int, error) {
	ifaces := map[int]string{}
	ifindex := 0
	var names []string
	for _, a := range atts {
		ifaces[int(a.Ifindex)] = a.Interface
		names = append(names, a.Interface)
		if a.Interface == iface {
			ifindex = int(a.Ifindex)
		}
	}
	if iface != "" && ifindex == 0 {
		return nil, 0, fmt.Errorf("capture: --interface %s: the program is not attached to it (attached: %s)", iface, strings.Join(names, ", "))
	}
	return ifaces, ifindex, nil
}

// describeCapture is what the program decided: "tx encapsulated table
// web row 0x1a2b primary 10.0.0.5 secondary 10.0.0.6", or "pass
// pass_no_bind"; for a UDP packet of a table with QUIC-LB routing, then
// "quic routed" or "quic fallback unknown_id" (why the row chose) and the
// destination connection ID.
func describeCapture(r loader.CaptureRecord, reasons []string, tableOf func(int) capturedTable) string {
	name := func(c int) string {
		if c >= 0 && c < len(reasons) {
			return reasons[c]
		}
		return fmt.Sprint(c)
	}
	s := actionName(r.Action) + " " + name(r.Reason)
	var t capturedTable
	if r.Table >= 0 {
		t = tableOf(r.Table)
		s += fmt.Sprintf(" table %s row %#04x", t.name, r.Row)
	}
	if r.Action == abi.XDPTX {
		if h, inner, err := gue.ParseFrame(r.Frame); err == nil {
			s += " primary " + h.Hops[0].String()
			if len(h.Hops) > 1 {
				s += " secondary " + h.Hops[1].String()
			}
			if r.QUIC != 0 {
				s += " quic " + strings.Replace(strings.TrimPrefix(name(r.QUIC), "quic_"), "fallback_", "fallback ", 1)
				if cid := model.QUICDestID(udpPayload(r.Frame[inner:]), t.quic); cid != nil {
					s += " cid " + hex.EncodeToString(cid)
				}
			}
		}
	}
	return s
}

// udpPayload is the payload of the UDP packet in an IP packet (nil for
// another protocol, or IPv6 with extension headers).
func udpPayload(ip []byte) []byte {
	switch {
	case len(ip) >= 20 && ip[0]>>4 == 4 && ip[9] == 17:
		if l := int(ip[0]&0xf) * 4; len(ip) >= l+8 {
			return ip[l+8:]
		}
	case len(ip) >= 48 && ip[0]>>4 == 6 && ip[6] == 17:
		return ip[48:]
	}
	return nil
}

// captureOutput is where captured packets go: pcap or pcapng to a file
// or stdout, or lines.
func captureOutput(e *env, path string, snaplen int, ifaces map[int]string) (func(loader.CaptureRecord, string) error, func() error, error) {
	if path == "" {
		return func(r loader.CaptureRecord, what string) error {
			iface, ok := ifaces[r.Ifindex]
			if !ok {
				iface = fmt.Sprintf("ifindex %d", r.Ifindex)
			}
			_, err := fmt.Fprintf(e.stdout, "%s %s %s | %s\n", r.Time.Format("15:04:05.000000"), iface, what, pkt.Describe(r.Frame))
			return err
		}, func() error { return nil }, nil
	}
	var w io.Writer = e.stdout
	closeFile := func() error { return nil }
	if path != "-" {
		file, err := newOwnFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("capture: %w", err)
		}
		w, closeFile = file, file.Close
	}
	info := func(r loader.CaptureRecord) gopacket.CaptureInfo {
		return gopacket.CaptureInfo{Timestamp: r.Time, CaptureLength: len(r.Frame), Length: r.Len}
	}
	if strings.HasSuffix(path, ".pcapng") {
		ng, err := pcapgo.NewNgWriter(w, layers.LinkTypeEthernet)
		if err != nil {
			closeFile()
			return nil, nil, fmt.Errorf("capture: %w", err)
		}
		return func(r loader.CaptureRecord, what string) error {
				return ng.WritePacketWithOptions(info(r), r.Frame, pcapgo.NgPacketOptions{Comments: []string{what}})
			}, func() error {
				err := ng.Flush()
				if cerr := closeFile(); err == nil {
					err = cerr
				}
				return err
			}, nil
	}
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(uint32(snaplen), layers.LinkTypeEthernet); err != nil {
		closeFile()
		return nil, nil, fmt.Errorf("capture: %w", err)
	}
	return func(r loader.CaptureRecord, _ string) error { return pw.WritePacket(info(r), r.Frame) }, closeFile, nil
}

// newOwnFile is a new, empty file of this user's, mode 0600, at path
// (packets are private): made aside and renamed into place, so that a file
// there before, whoever's it was and whatever its mode, is replaced rather
// than written into, and a symbolic link there is refused rather than
// followed or replaced (table.CheckReplaceable).
func newOwnFile(path string) (*os.File, error) {
	if err := table.CheckReplaceable(path); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}
