package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/signal"
	"syscall"
	"time"

	"github.com/director/director/internal/backendrun"
	"github.com/director/director/loader"
)

// backendRunHelp is 'backend run's part of 'director help backend'.
const backendRunHelp = "'backend run --attach IFACE' is the backend side as a service: it sets the program up as 'backend\n" +
	"attach' does, then takes GUE for the host's addresses as they are added and removed, attaches it again\n" +
	"when its attachment is lost (on netlink's events and every --interval), and serves its counters as\n" +
	"Prometheus metrics (--metrics ADDR:PORT), the second-chance packets received among them. SIGTERM\n" +
	"stops it and leaves the program attached, decapsulating."

// runBackendRun is 'backend run'.
func runBackendRun(e *env, c *command, args []string) error {
	fs := e.flags(c)
	dir := fs.String("backend-bpffs", loader.BackendDir, "bpffs `DIR` the backend program is pinned in")
	iface := fs.String("attach", "", "the interface GUE comes in by, `IFACE`")
	mode := fs.String("mode", loader.ModeNative, "XDP `MODE`: native or generic")
	self := fs.String("self", "", "this host's `ADDR`, the source of forwarded packets (default: the interface's)")
	trust := trustFlag(fs)
	noSecond := fs.Bool("no-second-chance", false, "decapsulate every GUE packet, never forward one (for testing)")
	metrics := fs.String("metrics", "", "serve Prometheus metrics at http://`ADDR:PORT`/metrics")
	interval := durationFlag(fs, "interval", 5*time.Second, "`D`, how often the attachment and the addresses are looked at besides netlink's events")
	logFormat := fs.String("log-format", "text", "log `FORMAT`: text or json")
	if _, err := e.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if e.set["bpffs"] {
		*dir = e.bpffs
	}
	switch {
	case *iface == "":
		return errors.New("backend run: --attach IFACE is required (see 'director help backend')")
	case *mode != loader.ModeNative && *mode != loader.ModeGeneric:
		return fmt.Errorf("backend run: --mode %q: want native or generic", *mode)
	case *interval <= 0:
		return fmt.Errorf("backend run: --interval %s: must be more than zero", *interval)
	}
	ps, err := parseTrust(*trust)
	if err != nil {
		return fmt.Errorf("backend run: %w", err)
	}
	s := loader.BackendSetup{Iface: *iface, Mode: *mode, SecondChance: !*noSecond, Trust: ps}
	if *self != "" {
		if s.Self, err = netip.ParseAddr(*self); err != nil {
			return fmt.Errorf("backend run: --self: %w", err)
		}
	}
	log, err := serviceLog(e, *logFormat)
	if err != nil {
		return fmt.Errorf("backend run: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return backendrun.Run(ctx, backendrun.Options{BPFFS: *dir, Setup: s, MetricsAddr: *metrics, Interval: *interval, Log: log})
}
