package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/director/director/loader"
)

var statsCmd = &command{
	uses: usesBPFFS,
	name: "stats", args: "[--json] [--watch [--interval D] [--count N]]",
	summary: "Show the datapath's and the attached interfaces' counters.",
	help: "Show the datapath's counters: global (processed, matched, encapsulated, passed and errors by\n" +
		"reason), per table and per backend (packets and bytes of the original IP packets sent to it as\n" +
		"primary), and the attached interfaces' own counters (dropped frames included), with their\n" +
		"drivers' counters of drops (ethtool -S, each queue's summed: virtio_net's XDP and XDP_TX drops).\n" +
		"--watch prints them again every interval, with rates, until interrupted.",
	run: runStats,
}

func runStats(e *env, c *command, args []string) error {
	fs := e.flags(c)
	asJSON := fs.Bool("json", false, "print a JSON document; with --watch, one per line")
	watch := fs.Bool("watch", false, "keep printing every --interval")
	interval := durationFlag(fs, "interval", time.Second, "`D`, the time between --watch updates, such as 1s or 500ms")
	count := fs.Int("count", 0, "with --watch, stop after `N` updates (0: until interrupted)")
	if _, err := e.parse(fs, args, 0, 0); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case !*watch && (set["interval"] || set["count"]):
		return errors.New("stats: --interval and --count go with --watch")
	case *interval <= 0:
		return fmt.Errorf("stats: --interval %s: must be more than zero", *interval)
	case *count < 0:
		return fmt.Errorf("stats: --count %d: must be zero (until interrupted) or more", *count)
	}
	d, err := e.open()
	if err != nil {
		return err
	}
	defer d.Close()
	prev, err := d.Stats()
	if err != nil {
		return err
	}
	if !*watch {
		if *asJSON {
			return writeJSON(e.stdout, prev)
		}
		printStats(e, prev, nil)
		return nil
	}
	return watchStats(e, d, prev, *interval, *count, *asJSON)
}

// watchStats prints the counters every interval, count times (0: until
// interrupted): with rates since the last (text), or a JSON document a
// line.
func watchStats(e *env, d *loader.Director, prev *loader.Stats, interval time.Duration, count int, asJSON bool) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	enc := json.NewEncoder(e.stdout) // one document per line
	for n := 0; count == 0 || n < count; n++ {
		select {
		case <-sig:
			return nil
		case <-tick.C:
		}
		cur, err := d.Stats()
		if err != nil {
			return err
		}
		if asJSON {
			if err := enc.Encode(cur); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(e.stdout, "--- %s\n", cur.Time.Format(time.RFC3339))
			printStats(e, cur, prev)
		}
		prev = cur
	}
	return nil
}

func rate(cur, prev uint64, dt time.Duration) string {
	if dt <= 0 || cur < prev {
		return ""
	}
	return fmt.Sprintf("  %.0f/s", float64(cur-prev)/dt.Seconds())
}

// printStats prints s, with rates since prev when it is not nil.
func printStats(e *env, s, prev *loader.Stats) {
	w := e.stdout
	var dt time.Duration
	if prev != nil {
		dt = s.Time.Sub(prev.Time)
	}
	width := 0 // the longest name's: the values in one column
	for _, n := range loader.CounterNames() {
		width = max(width, len(n))
	}
	for _, n := range loader.CounterNames() {
		v := s.Global[n]
		r := ""
		if prev != nil {
			r = rate(v, prev.Global[n], dt)
		}
		fmt.Fprintf(w, "%-*s %14d%s\n", width, n, v, r)
	}
	for i, t := range s.Tables {
		r := ""
		if prev != nil && i < len(prev.Tables) && prev.Tables[i].Name == t.Name {
			r = rate(t.Traffic.Packets, prev.Tables[i].Traffic.Packets, dt)
		}
		fmt.Fprintf(w, "\ntable %s: %d packets, %d bytes%s\n", t.Name, t.Traffic.Packets, t.Traffic.Bytes, r)
		for _, b := range t.Backends {
			weight := ""
			if b.Weight != 1 {
				weight = fmt.Sprintf("  weight %d", b.Weight)
			}
			if b.Domain != "" {
				weight += "  in " + b.Domain
			}
			if b.Cap > 0 {
				weight += fmt.Sprintf("  cap %d", b.Cap)
				if b.AtCap {
					weight += " (at cap)"
				}
			}
			fmt.Fprintf(w, "  %-15s %-9s %-9s %12d packets %14d bytes%s\n", b.IP, b.State, healthWord(b.Healthy), b.Packets, b.Bytes, weight)
		}
		printQUICStats(w, t.QUIC)
	}
	var before []loader.InterfaceStats
	if prev != nil {
		before = prev.Interfaces
	}
	printInterfaces(e, s.Interfaces, before, dt)
}

// printInterfaces prints the attached interfaces' own counters. Drops are
// flagged as they happen: with the previous sample (--watch), when the
// count grew since; the count alone is what the interface dropped since it
// came up, perhaps long ago.
func printInterfaces(e *env, ifs, prev []loader.InterfaceStats, dt time.Duration) {
	for _, i := range ifs {
		fmt.Fprintf(e.stdout, "\ninterface %s: rx %d packets, %d dropped, %d errors; tx %d packets, %d dropped, %d errors\n",
			i.Interface, i.RxPackets, i.RxDropped, i.RxErrors, i.TxPackets, i.TxDropped, i.TxErrors)
		if len(i.DriverDrops) > 0 {
			names := slices.Sorted(maps.Keys(i.DriverDrops))
			parts := make([]string, len(names))
			for k, n := range names {
				parts[k] = fmt.Sprintf("%s %d", n, i.DriverDrops[n])
			}
			fmt.Fprintf(e.stdout, "  driver %s drops: %s\n", i.Driver, strings.Join(parts, ", "))
		}
		var was *loader.InterfaceStats
		for k := range prev {
			if prev[k].Interface == i.Interface {
				was = &prev[k]
			}
		}
		switch {
		case was != nil && i.TxDropped > was.TxDropped:
			n := i.TxDropped - was.TxDropped
			fmt.Fprintf(e.stdout, "  ! %d frames dropped on their way out in the last %v (%.0f/s): encapsulated packets are not all leaving\n",
				n, dt.Round(time.Millisecond), float64(n)/dt.Seconds())
		case was == nil && prev == nil && i.TxDropped > 0:
			fmt.Fprintf(e.stdout, "  (%d frames dropped on their way out since the interface came up; 'stats --watch' shows whether that goes on)\n", i.TxDropped)
		}
	}
}

// printQUICStats prints a table's QUIC-LB counters, a line per config its
// packets' connection IDs carried.
func printQUICStats(w io.Writer, qs []loader.QUICStats) {
	for _, q := range qs {
		what := "no ID read"
		if q.ConfigID != nil {
			what = fmt.Sprintf("config %d", *q.ConfigID)
		}
		var parts []string
		for _, n := range loader.CounterNames() {
			if v, ok := q.Counters[n]; ok {
				parts = append(parts, fmt.Sprintf("%s %d", strings.TrimPrefix(n, "quic_"), v))
			}
		}
		if len(parts) == 0 {
			parts = []string{"no packets"}
		}
		fmt.Fprintf(w, "  QUIC %-10s %s\n", what+":", strings.Join(parts, ", "))
	}
}
