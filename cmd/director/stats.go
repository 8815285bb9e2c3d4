package main

import (
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/director/director/loader"
)

func init() {
	c := &command{
		name: "stats", args: "[--json] [--watch] [--interval D] [--count N]",
		summary: "Show the datapath's counters: global (processed, matched, encapsulated, passed and errors by\n" +
			"reason), per table and per backend (packets and bytes of the original IP packets sent to it as\n" +
			"primary). --watch prints them again every interval, with rates, until interrupted.",
	}
	c.run = func(e *env, args []string) error {
		fs := e.flags(c)
		e.globalFlags(fs)
		asJSON := fs.Bool("json", false, "print JSON documents (one per line with --watch)")
		watch := fs.Bool("watch", false, "keep printing every --interval")
		interval := fs.Duration("interval", time.Second, "time between --watch updates")
		count := fs.Int("count", 0, "with --watch, stop after N updates (0: until interrupted)")
		if _, err := parse(fs, args, 0, 0); err != nil {
			return err
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
			printStats(e, prev, nil, 0)
			return nil
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		defer signal.Stop(sig)
		tick := time.NewTicker(*interval)
		defer tick.Stop()
		last := time.Now()
		for n := 0; *count == 0 || n < *count; n++ {
			select {
			case <-sig:
				return nil
			case <-tick.C:
			}
			cur, err := d.Stats()
			if err != nil {
				return err
			}
			now := time.Now()
			if *asJSON {
				if err := writeJSON(e.stdout, cur); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(e.stdout, "--- %s\n", now.Format(time.RFC3339))
				printStats(e, cur, prev, now.Sub(last))
			}
			prev, last = cur, now
		}
		return nil
	}
	register(c)
}

func rate(cur, prev uint64, dt time.Duration) string {
	if dt <= 0 || cur < prev {
		return ""
	}
	return fmt.Sprintf("  %.0f/s", float64(cur-prev)/dt.Seconds())
}

func printStats(e *env, s, prev *loader.Stats, dt time.Duration) {
	w := e.stdout
	for _, n := range loader.CounterNames {
		v := s.Global[n]
		r := ""
		if prev != nil {
			r = rate(v, prev.Global[n], dt)
		}
		fmt.Fprintf(w, "%-22s %14d%s\n", n, v, r)
	}
	for i, t := range s.Tables {
		r := ""
		if prev != nil && i < len(prev.Tables) && prev.Tables[i].Name == t.Name {
			r = rate(t.Traffic.Packets, prev.Tables[i].Traffic.Packets, dt)
		}
		fmt.Fprintf(w, "\ntable %s: %d packets, %d bytes%s\n", t.Name, t.Traffic.Packets, t.Traffic.Bytes, r)
		for _, b := range t.Backends {
			fmt.Fprintf(w, "  %-15s %-9s %-9s %12d packets %14d bytes\n", b.IP, b.State, health(b.Healthy), b.Packets, b.Bytes)
		}
	}
}
