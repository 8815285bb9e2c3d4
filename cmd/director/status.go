package main

import (
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/director/director/internal/service/status"
	"github.com/director/director/loader"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/loader/xdpbuild"
	"github.com/director/director/table"
)

// statusDoc is status's JSON document (docs/formats.md, "status --json").
type statusDoc struct {
	Version int           `json:"version"`
	BPFFS   string        `json:"bpffs"`
	Program statusProgram `json:"program"`
	// Kernel is the running kernel, and what the programs use that it
	// lacks.
	Kernel      *loader.KernelSupport `json:"kernel"`
	Config      *statusConfig         `json:"config"` // null before one is written
	Attachments []loader.Attachment   `json:"attachments"`
	// The attached interfaces' own counters, drops included.
	Interfaces []loader.InterfaceStats `json:"interfaces"`
	Tables     []statusTable           `json:"tables"`
	// Memory is what the maps hold, as the kernel counts it.
	Memory loader.MapMemory `json:"memory"`
	// Service is what a 'director run' for these pins publishes (its BGP
	// sessions); null when none runs.
	Service *status.Status `json:"service"`
}

type statusProgram struct {
	Pin string `json:"pin"`
	ID  uint32 `json:"id"`
	Tag string `json:"tag"`
}

type statusConfig struct {
	SourceIP        string `json:"source_ip"`              // "" when the config has only an IPv6 one
	SourceIP6       string `json:"source_ip6,omitempty"`   // GUE over IPv6's
	GatewayMAC6     string `json:"gateway_mac6,omitempty"` // when it differs from gateway_mac
	OutboundMTU     int    `json:"outbound_mtu,omitempty"` // 0: the interface's
	GatewayMAC      string `json:"gateway_mac"`
	HashFields      string `json:"hash_fields"`
	AltHashFields   string `json:"alt_hash_fields"`
	ForwardICMPEcho bool   `json:"forward_icmp_echo"`
}

type statusTable struct {
	Index       int      `json:"index"`
	Name        string   `json:"name"`
	Fingerprint string   `json:"fingerprint"`
	Slot        int      `json:"slot"`
	Backends    int      `json:"backends"`
	Binds       []string `json:"binds"`
	// History is what the table remembers of its rows' earlier
	// primaries (not part of its fingerprint): absent for nothing.
	History *statusHistory `json:"history,omitempty"`
	// Problems are what a person should look at in it: its backends the
	// service's checks find down, fail-static, a held change.
	Problems []string `json:"problems,omitempty"`
}

// statusHistory is a live table's history, beside its rows.
type statusHistory struct {
	WindowS int       `json:"window_s"`
	Hops    bool      `json:"hops"`     // listed in the packets (history_hops)
	Rows    int       `json:"rows"`     // rows that remember an earlier primary
	HopRows int       `json:"hop_rows"` // of them, rows whose packets list one after the secondary
	MaxHops int       `json:"max_hops"` // the most a row lists
	Removed []string  `json:"removed"`  // backends the table no longer has, still in chains
	Until   time.Time `json:"until"`    // when the last entry is forgotten
}

var statusCmd = &command{
	uses: usesBPFFS,
	name: "status", args: "[--json] [--all]",
	summary: "Show what the kernel holds.",
	help: "Show what the kernel holds: the pinned program, the kernel's release and anything it lacks of what\n" +
		"the programs use, attached interfaces, the director config, and the live tables read back from the\n" +
		"maps with their fingerprints; and a 'director run' serving the pins: its pid, files, last apply,\n" +
		"held changes, fail-static tables and checks.",
	run: runStatus,
}

func runStatus(e *env, c *command, args []string) error {
	fs := e.flags(c)
	asJSON := fs.Bool("json", false, "print a JSON document")
	all := fs.Bool("all", false, "list every table; without it, past 8 tables only those with a problem are listed and the rest counted")
	if _, err := e.parse(fs, args, 0, 0); err != nil {
		return err
	}
	d, err := e.open()
	if err != nil {
		return err
	}
	defer d.Close()
	doc, err := readStatus(e, d)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, doc)
	}
	printStatus(e, doc, *all)
	return nil
}

func readStatus(e *env, d *loader.Director) (*statusDoc, error) {
	info, err := d.Prog.Info()
	if err != nil {
		return nil, err
	}
	id, _ := info.ID()
	doc := &statusDoc{Version: 1, BPFFS: e.bpffs, Program: statusProgram{Pin: filepath.Join(e.bpffs, "prog"), ID: uint32(id), Tag: info.Tag},
		Attachments: []loader.Attachment{}, Tables: []statusTable{}}
	if doc.Kernel, err = loader.ProbeKernel(); err != nil {
		return nil, err
	}
	if doc.Attachments, err = d.Attachments(); err != nil {
		return nil, err
	}
	if doc.Attachments == nil {
		doc.Attachments = []loader.Attachment{}
	}
	if doc.Interfaces, err = d.InterfaceStats(); err != nil {
		return nil, err
	}
	if dc, err := d.LiveConfig(); err != nil {
		return nil, err
	} else if dc != nil {
		doc.Config = &statusConfig{GatewayMAC: dc.GatewayMAC.String(), HashFields: dc.HashFields.String(),
			AltHashFields: dc.AltHashFields.String(), ForwardICMPEcho: dc.ForwardICMPEcho}
		if dc.SrcIP.IsValid() {
			doc.Config.SourceIP = dc.SrcIP.String()
		}
		if dc.SrcIP6.IsValid() {
			doc.Config.SourceIP6 = dc.SrcIP6.String()
		}
		if g6 := dc.Gateway6(); g6.String() != dc.GatewayMAC.String() {
			doc.Config.GatewayMAC6 = g6.String()
		}
		doc.Config.OutboundMTU = dc.OutboundMTU
	}
	live, err := d.Live()
	if err != nil {
		return nil, err
	}
	for i, lt := range live {
		st := statusTable{Index: i, Name: lt.Table.Name, Fingerprint: table.Fingerprint(lt.Table), Slot: lt.Slot,
			Backends: len(lt.Table.Backends), Binds: []string{}}
		for _, b := range lt.Table.Binds {
			st.Binds = append(st.Binds, b.String())
		}
		st.History = historyStatus(lt)
		doc.Tables = append(doc.Tables, st)
	}
	if doc.Memory, err = d.MapMemory(); err != nil {
		return nil, err
	}
	if doc.Service, err = status.Read(status.DefaultLockDir, e.bpffs); err != nil {
		return nil, err
	}
	for i, lt := range live {
		doc.Tables[i].Problems = doc.Service.Problems(lt.Table, doc.Tables[i].Name)
	}
	return doc, nil
}

// listTables is how many tables status lists when it is not told --all:
// past it, the tables with a problem are listed and the rest counted.
const listTables = 8

func printStatus(e *env, doc *statusDoc, all bool) {
	w := e.stdout
	fmt.Fprintf(w, "program      %d (tag %s) pinned at %s\n", doc.Program.ID, doc.Program.Tag, doc.Program.Pin)
	fmt.Fprintln(w, kernelLine(doc.Kernel))
	if len(doc.Attachments) == 0 {
		fmt.Fprintln(w, "attached     (no interfaces)")
	}
	for _, a := range doc.Attachments {
		fmt.Fprintf(w, "%s\n", attachmentLine(a))
	}
	for _, i := range doc.Interfaces {
		fmt.Fprintf(w, "interface    %s: rx %d packets, %d dropped; tx %d packets, %d dropped, %d errors\n",
			i.Interface, i.RxPackets, i.RxDropped, i.TxPackets, i.TxDropped, i.TxErrors)
	}
	if doc.Config == nil {
		fmt.Fprintln(w, "config       (none: packets for binds are passed until one is applied: director plan CONFIG --director-config FILE)")
	} else {
		c := doc.Config
		src := c.SourceIP
		if src == "" {
			src = "(none: no IPv4 backends can be served)"
		}
		if c.SourceIP6 != "" {
			src += ", IPv6 source " + c.SourceIP6
		}
		gw := c.GatewayMAC
		if c.GatewayMAC6 != "" {
			gw += ", IPv6 gateway " + c.GatewayMAC6
		}
		mtu := ""
		if c.OutboundMTU != 0 {
			mtu = fmt.Sprintf(", outbound MTU %d", c.OutboundMTU)
		}
		fmt.Fprintf(w, "config       source %s, gateway %s, hash %s, alt hash %s, ICMP echo forwarding %v%s\n",
			src, gw, c.HashFields, c.AltHashFields, c.ForwardICMPEcho, mtu)
	}
	if len(doc.Tables) == 0 {
		fmt.Fprintln(w, "tables       (none)")
	}
	counted := !all && len(doc.Tables) > listTables
	quiet := 0
	for _, t := range doc.Tables {
		if counted && len(t.Problems) == 0 {
			quiet++
			continue
		}
		name := table.DisplayName(t.Name, t.Index)
		fmt.Fprintf(w, "table        %s  fingerprint %s  %d backends  binds %v\n", name, table.ShortFingerprint(t.Fingerprint), t.Backends, t.Binds)
		if h := t.History; h != nil {
			listed := "not listed in the packets (history_hops false)"
			if h.Hops {
				listed = fmt.Sprintf("%d list one after the secondary, up to %d", h.HopRows, h.MaxHops)
			}
			removed := ""
			if len(h.Removed) > 0 {
				removed = fmt.Sprintf("; removed backends still in chains: %s", strings.Join(h.Removed, ", "))
			}
			fmt.Fprintf(w, "  history    %d rows remember an earlier primary (%s) until %s%s\n", h.Rows, listed, h.Until.Format(time.RFC3339), removed)
		}
		for _, p := range t.Problems {
			fmt.Fprintf(w, "  problem    %s\n", p)
		}
	}
	if quiet > 0 {
		fmt.Fprintf(w, "tables       %d more live, none with a problem (status --all lists them)\n", quiet)
	}
	printMemory(w, doc.Memory)
	printService(w, doc.Service)
}

// printMemory is the maps' memory in a line: in all, the tables' inner
// maps, and the largest others.
func printMemory(w io.Writer, m loader.MapMemory) {
	tb := m.Of("tables")
	var largest []string
	for _, u := range m.Maps {
		if u.Name != "tables" && len(largest) < 3 {
			largest = append(largest, fmt.Sprintf("%s %s", u.Name, sizeString(u.Bytes)))
		}
	}
	fmt.Fprintf(w, "maps         %s in %d maps, as the kernel counts them: the tables %s in %d inner maps (every slot written since load: the live tables' and earlier ones'); the largest others %s\n",
		sizeString(m.Bytes), len(m.Maps), sizeString(tb.Bytes), tb.Inner, strings.Join(largest, ", "))
}

// sizeString is a byte count for a person: KiB or MiB, one decimal.
func sizeString(b uint64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", b)
}

func printService(w io.Writer, st *status.Status) {
	switch {
	case st == nil:
		fmt.Fprintln(w, "service      (no 'director run' for these pins)")
		return
	case st.Stale:
		fmt.Fprintf(w, "service      (not running: the last status is from pid %d at %s)\n", st.PID, st.Time.Format(time.RFC3339))
		return
	}
	files := st.Config
	if st.DirectorConfig != "" {
		files += ", " + st.DirectorConfig
	}
	fmt.Fprintf(w, "service      director run, pid %d, since %s; config %s\n", st.PID, st.Since.Format(time.RFC3339), files)
	if a := st.LastApply; a != nil {
		fmt.Fprintf(w, "last apply   %s (%s): %s\n", a.Time.Format(time.RFC3339), a.Trigger, strings.Join(a.Changes, "; "))
	} else {
		fmt.Fprintln(w, "last apply   (none since it started: it found the tables as they should be)")
	}
	c := st.Checks
	fmt.Fprintf(w, "checks       %d backends checked: %d up, %d down; %d failing their last check\n", c.Backends, c.Up, c.Down, c.Failing)
	for _, t := range st.FailStatic {
		fmt.Fprintf(w, "fail-static  %s: its health changes are held (too many backends fail their checks at once)\n", t)
	}
	for _, h := range st.Held {
		fmt.Fprintf(w, "held         an unsafe change, for 'director apply --allow-unsafe': %s\n", strings.Join(h.Reasons, "; "))
	}
	if j := st.JoiningUntil; j != nil {
		fmt.Fprintf(w, "joining      with no history: serving, the VIPs announced at %s (--no-history-wait announces at once)\n", j.Format(time.RFC3339))
	}
	if st.BGP == nil {
		fmt.Fprintln(w, "bgp          (no bgp settings)")
		return
	}
	b := st.BGP
	fmt.Fprintf(w, "bgp          as %d, router id %s, announcing %v\n", b.ASN, b.RouterID, b.Announced)
	for _, p := range b.Peers {
		since := ""
		if p.Established {
			since = " since " + p.Since.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "bgp peer     %s as %d: %s%s, %d prefixes advertised, %d flaps\n", p.Address, p.ASN, p.State, since, p.Advertised, p.Flaps)
	}
}

// attachmentLine describes an attachment in one line of status text.
func attachmentLine(a loader.Attachment) string {
	switch a.State {
	case loader.StateAttached:
		return fmt.Sprintf("attached     %s, %s mode (link %d)", a.Interface, a.Mode, a.LinkID)
	case loader.StateOtherNamespace:
		return fmt.Sprintf("attached     %s, in another network namespace (ifindex %d there, link %d)", a.Interface, a.Ifindex, a.LinkID)
	}
	return fmt.Sprintf("gone         %s: the interface no longer exists, so the link steers nothing (link %d); 'detach %s' removes it",
		a.Interface, a.LinkID, a.Interface)
}

// kernelLine describes the running kernel, and the build of the programs
// it runs, in status text.
func kernelLine(k *loader.KernelSupport) string {
	var line string
	if len(k.Missing) == 0 {
		line = fmt.Sprintf("kernel       %s: has everything the programs use", k.Release)
	} else {
		line = fmt.Sprintf("kernel       %s: lacks %s", k.Release, strings.Join(k.Missing, "; "))
	}
	if k.Build == "" {
		return line
	}
	line += fmt.Sprintf("\nbuild        %s", k.Build)
	switch {
	case len(k.Lacking) > 0:
		line += fmt.Sprintf(" (this kernel lacks %s)", strings.Join(k.Lacking, ", "))
	case k.Build == xdpbuild.SingleBuffer:
		line += fmt.Sprintf(" (as %s asks: this kernel runs the multi-buffer one)", xdpbuild.Env)
	}
	for _, f := range k.Fallbacks {
		line += "\n             " + f
	}
	return line
}

// historyStatus is lt's history for status, nil when it remembers
// nothing.
func historyStatus(lt mapimage.LiveTable) *statusHistory {
	h := lt.History
	if h.Empty() {
		return nil
	}
	st := &statusHistory{WindowS: int(lt.Table.History.Window / time.Second), Hops: !lt.Table.History.NoHops, MaxHops: h.MaxHops, Removed: []string{}}
	st.Rows, st.HopRows, st.Until = h.Summary()
	own := map[netip.Addr]bool{}
	for _, b := range lt.Table.Backends {
		own[b.IP] = true
	}
	for _, b := range h.Backends {
		if !own[b.IP] {
			st.Removed = append(st.Removed, b.IP.String())
		}
	}
	return st
}
